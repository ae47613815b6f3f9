// Collectives across nodes; see node_collectives.h.
#include "executor/calibrate/node_collectives.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "executor/comm/mpi_check.h"

namespace strata::calibrate {

NodeLinkGroups node_link_groups(const NodeLayout& layout) {
  std::vector<std::vector<int>> ranks_of_node(static_cast<size_t>(layout.nodes()));
  for (int r = 0; r < layout.ranks(); ++r) {
    ranks_of_node[static_cast<size_t>(layout.node_of(r))].push_back(r);
  }
  NodeLinkGroups groups;
  const auto first_pair = std::find_if(ranks_of_node.begin(), ranks_of_node.end(),
                                       [](const std::vector<int>& node) { return node.size() >= 2; });
  if (first_pair != ranks_of_node.end()) groups.intra_node = *first_pair;
  if (layout.nodes() >= 2) {
    for (const std::vector<int>& node : ranks_of_node) groups.inter_node.push_back(node.front());
  }
  const std::size_t n = groups.inter_node.size();
  if (n >= 3) {
    for (std::size_t i = 0; i < n; ++i) {
      groups.inter_node_hops.emplace_back(groups.inter_node[i], groups.inter_node[(i + 1) % n]);
    }
  }
  return groups;
}

namespace {

// A barrier over comm whose waiting ranks sleep between polls instead of spinning.
void sleeping_barrier(const MpiCommunicator& comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ibarrier(comm.handle(), &request));
  for (int done = 0;;) {
    MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

using Measure = std::function<std::vector<CollectiveFit>(MpiCommunicator&, const CollectiveBenchOptions&)>;

std::vector<CollectiveFit> every_op(MpiCommunicator& comm, const CollectiveBenchOptions& options) {
  return measure_collectives(comm, options);
}

std::vector<CollectiveFit> p2p_only(MpiCommunicator& comm, const CollectiveBenchOptions& options) {
  return {measure_p2p(comm, options)};
}

// The fits `measure` makes on one link's group, shared from its first rank with every rank of
// world.
std::vector<CollectiveFit> measure_group(MpiCommunicator& world, const std::vector<int>& group,
                                         CollectiveBenchOptions options, LinkClass link,
                                         const Measure& measure) {
  const bool member = std::find(group.begin(), group.end(), world.rank()) != group.end();
  const std::unique_ptr<MpiCommunicator> part =
      world.split(member ? 0 : MPI_UNDEFINED, world.rank());
  std::vector<CollectiveFit> fits;
  if (part) {
    options.link = link;
    fits = measure(*part, options);
  }
  sleeping_barrier(world);
  // Every rank learns the group's fits (the same on every member) from its first rank, as
  // numbers: op index, ranks, latency, bandwidth.
  constexpr int kWords = 4;
  const std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather", "p2p"};
  int count = static_cast<int>(fits.size());
  MPI_CHECK(MPI_Bcast(&count, 1, MPI_INT, group.front(), world.handle()));
  std::vector<double> words(static_cast<size_t>(count) * kWords);
  if (world.rank() == group.front()) {
    for (int i = 0; i < count; ++i) {
      const CollectiveFit& f = fits[static_cast<size_t>(i)];
      const auto op = std::find(ops.begin(), ops.end(), f.op) - ops.begin();
      const double row[kWords] = {static_cast<double>(op), static_cast<double>(f.ranks),
                                  f.latency_s, f.bus_bandwidth_bytes_per_s};
      std::copy(row, row + kWords, words.begin() + static_cast<std::ptrdiff_t>(i) * kWords);
    }
  }
  MPI_CHECK(MPI_Bcast(words.data(), count * kWords, MPI_DOUBLE, group.front(), world.handle()));
  fits.clear();
  for (int i = 0; i < count; ++i) {
    const double* row = &words[static_cast<size_t>(i) * kWords];
    CollectiveFit f;
    f.op = ops.at(static_cast<size_t>(row[0]));
    f.link = to_string(link);
    f.ranks = static_cast<std::int64_t>(row[1]);
    f.latency_s = row[2];
    f.bus_bandwidth_bytes_per_s = row[3];
    fits.push_back(f);
  }
  return fits;
}

}  // namespace

std::vector<CollectiveFit> measure_node_links(MpiCommunicator& world, const NodeLayout& layout,
                                              const CollectiveBenchOptions& options,
                                              const std::function<void(LinkClass)>& progress) {
  if (layout.ranks() != world.size()) {
    throw std::invalid_argument(fmt::format(
        "measure_node_links: the layout has {} ranks, the job {}", layout.ranks(), world.size()));
  }
  const NodeLinkGroups groups = node_link_groups(layout);
  std::vector<CollectiveFit> fits;
  for (const auto& [link, group] : {std::pair{LinkClass::kIntraNode, &groups.intra_node},
                                    std::pair{LinkClass::kInterNode, &groups.inter_node}}) {
    if (group->empty()) continue;
    if (progress && world.rank() == 0) progress(link);
    const std::vector<CollectiveFit> part = measure_group(world, *group, options, link, every_op);
    fits.insert(fits.end(), part.begin(), part.end());
  }
  // The slowest hop: the least bandwidth, ties to the earlier hop. Every rank holds every
  // hop's fit, so every rank picks the same.
  std::optional<CollectiveFit> slowest;
  for (const auto& [a, b] : groups.inter_node_hops) {
    const CollectiveFit hop =
        measure_group(world, {a, b}, options, LinkClass::kInterNode, p2p_only).front();
    if (!slowest || hop.bus_bandwidth_bytes_per_s < slowest->bus_bandwidth_bytes_per_s) slowest = hop;
  }
  if (slowest) fits.push_back(*slowest);
  return fits;
}

}  // namespace strata::calibrate
