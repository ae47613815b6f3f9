// `strata run` across nodes (run_nodes.h).
#include "tools/strata/run_nodes.h"

#include <mpi.h>

#include <cstring>
#include <iostream>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cost_model/specs/errors.h"
#include "executor/comm/hostfile.h"
#include "executor/offload/nvme_store.h"
#include "tools/strata/commands.h"

namespace strata::cli {
namespace fs = std::filesystem;

namespace {

// A node's own directory under --nvme-dir when the job spans nodes: <nvme-dir>/node-<host>.
constexpr const char* kNodeDirPrefix = "node-";

// This process's host name, as the other ranks will see it.
std::string this_host() {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  if (MPI_Get_processor_name(name, &length) != MPI_SUCCESS) {
    throw SystemError("MPI_Get_processor_name failed");
  }
  return std::string(name, static_cast<size_t>(length));
}

}  // namespace

std::pair<NodeLayout, std::string> planned_layout(const RunOptions& o, const Validated& v) {
  const int ranks = static_cast<int>(v.plan.world_size());
  if (!o.hostfile.empty()) {
    const std::string source = "--hostfile " + o.hostfile;
    return {NodeLayout::by_slots(read_hostfile(o.hostfile), ranks, source), source};
  }
  if (o.simulated_nodes() != 0) {
    return {NodeLayout::uniform(o.simulated_nodes(), o.ranks_per_node),
            fmt::format("--nodes {} --ranks-per-node {}", o.simulated_nodes(), o.ranks_per_node)};
  }
  return {NodeLayout::uniform(1, ranks), "this machine"};
}

std::pair<NodeLayout, std::string> running_layout(const RunOptions& o, MpiCommunicator& world,
                                                  const LaunchEnv& launch) {
  const std::string launcher = launch.launcher.empty() ? "the launcher" : launch.launcher;
  if (o.simulated_nodes() != 0) {
    if (o.simulated_nodes() * o.ranks_per_node != world.size()) {
      throw InfeasiblePlan(fmt::format("--nodes {} --ranks-per-node {} makes {} ranks, but {} "
                                       "started {}", o.simulated_nodes(), o.ranks_per_node,
                                       o.simulated_nodes() * o.ranks_per_node, launcher, world.size()));
    }
    return {NodeLayout::uniform(o.simulated_nodes(), o.ranks_per_node),
            fmt::format("--nodes {} --ranks-per-node {}", o.simulated_nodes(), o.ranks_per_node)};
  }
  return {gathered_layout(world), launcher};
}

// Hosts travel as a fixed 256 bytes per rank, as int64 words (the communicators move
// typed elements only).
NodeLayout gathered_layout(MpiCommunicator& world) {
  constexpr int kWords = 32;
  std::vector<std::int64_t> mine(kWords, 0), all(static_cast<size_t>(kWords) * world.size());
  const std::string host = this_host().substr(0, kWords * sizeof(std::int64_t) - 1);
  std::memcpy(mine.data(), host.data(), host.size());
  world.all_gather(mine.data(), all.data(), kWords);
  std::vector<std::string> hosts;
  for (int r = 0; r < world.size(); ++r) {
    hosts.emplace_back(reinterpret_cast<const char*>(&all[static_cast<size_t>(r) * kWords]));
  }
  return NodeLayout::from_hosts(hosts);
}

// Made by every rank of the node: an existing one is fine.
std::string node_nvme_dir(const RunOptions& o, const Validated& v, const NodeLayout& layout,
                          int world_rank) {
  if (!v.uses_nvme() || layout.nodes() <= 1) return o.nvme_dir;
  const fs::path dir = fs::path(o.nvme_dir) / (kNodeDirPrefix + layout.host_of(world_rank));
  std::error_code ec;
  fs::create_directory(dir, ec);
  if (ec && !fs::is_directory(dir)) {
    throw SystemError(fmt::format("--nvme-dir: cannot make the node's directory '{}': {}",
                                  dir.string(), ec.message()));
  }
  return dir.string();
}

void report_first_lost(const LivenessListener& liveness, int exit_code) {
  if (exit_code == 0 || exit_code == 2 || exit_code == kExitDoesNotFit ||
      exit_code == kExitCommTimeout) {
    return;
  }
  const std::vector<LivenessListener::Ended> ended = liveness.unfinished();
  if (ended.empty()) return;
  std::cerr << fmt::format("strata: rank {} on host {} ended first, without finishing its run "
                           "(its process killed or its node lost), {:.1f} s into the job; the "
                           "job ended with exit code {}\n",
                           ended.front().rank, ended.front().host, ended.front().at_s, exit_code)
            << std::flush;
}

void report_silent_ranks(const LivenessListener& liveness, double after_s) {
  std::vector<std::string> silent;
  for (const LivenessListener::Ended& e : liveness.still_connected()) {
    silent.push_back(fmt::format("{} on {}", e.rank, e.host));
  }
  std::cerr << fmt::format("strata: mpirun had not ended the job {:g} s after its first rank "
                           "ended; ended it here. Ranks never heard ending (their node stopped "
                           "answering?): {}\n",
                           after_s, silent.empty() ? std::string("none")
                                                   : fmt::format("{}", fmt::join(silent, ", ")))
            << std::flush;
}

void remove_stale_node_run_dirs(const fs::path& nvme_dir) {
  std::error_code ec;
  for (fs::directory_iterator it(nvme_dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec) && it->path().filename().string().rfind(kNodeDirPrefix, 0) == 0) {
      offload::remove_stale_run_dirs(it->path());
    }
  }
}

}  // namespace strata::cli
