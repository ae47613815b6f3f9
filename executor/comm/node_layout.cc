// NodeLayout and the check of a plan's groups against it (node_layout.h).
#include "executor/comm/node_layout.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cost_model/specs/errors.h"

namespace strata {

NodeLayout NodeLayout::by_slots(const std::vector<HostSlots>& hosts, int ranks,
                                const std::string& source) {
  int total = 0;
  for (const HostSlots& h : hosts) total += h.slots;
  if (total < ranks) {
    throw InfeasiblePlan(fmt::format("{}: {} slots on {} host(s), but the plan needs {} ranks",
                                     source, total, hosts.size(), ranks));
  }
  std::vector<std::string> host_of_rank;
  for (const HostSlots& h : hosts) {
    for (int s = 0; s < h.slots && static_cast<int>(host_of_rank.size()) < ranks; ++s) {
      host_of_rank.push_back(h.host);
    }
  }
  return from_hosts(host_of_rank);
}

NodeLayout NodeLayout::uniform(int nodes, int ranks_per_node) {
  std::vector<std::string> host_of_rank;
  for (int n = 0; n < nodes; ++n) {
    for (int r = 0; r < ranks_per_node; ++r) host_of_rank.push_back(fmt::format("node{}", n));
  }
  return from_hosts(host_of_rank);
}

NodeLayout NodeLayout::from_hosts(const std::vector<std::string>& host_of_rank) {
  NodeLayout layout;
  for (const std::string& host : host_of_rank) {
    const auto it = std::find(layout.hosts_.begin(), layout.hosts_.end(), host);
    layout.node_of_rank_.push_back(static_cast<int>(it - layout.hosts_.begin()));
    if (it == layout.hosts_.end()) layout.hosts_.push_back(host);
  }
  return layout;
}

int NodeLayout::local_rank(int world_rank) const {
  const int node = node_of(world_rank);
  return static_cast<int>(std::count(node_of_rank_.begin(), node_of_rank_.begin() + world_rank, node));
}

std::string NodeLayout::describe() const {
  std::string out;
  for (int n = 0; n < nodes(); ++n) {
    std::vector<int> ranks;
    for (int r = 0; r < this->ranks(); ++r) {
      if (node_of(r) == n) ranks.push_back(r);
    }
    // Consecutive ranks as a range, the usual case; otherwise listed.
    const bool consecutive = ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
    out += fmt::format("{}{}: rank{} {}", out.empty() ? "" : ", ", hosts_[static_cast<size_t>(n)],
                       ranks.size() > 1 ? "s" : "",
                       ranks.size() == 1 ? fmt::format("{}", ranks[0])
                       : consecutive     ? fmt::format("{}-{}", ranks.front(), ranks.back())
                                         : fmt::format("{}", fmt::join(ranks, ",")));
  }
  return out;
}

namespace {

// The first group (of the kind `along` walks) whose ranks are not on one node: its world
// ranks, or empty when every group stays inside a node.
template <typename Along>
std::vector<int> first_crossing_group(const ParallelDims& dims, const NodeLayout& layout,
                                      int group_size, Along along) {
  for (int r = 0; r < dims.world_size(); ++r) {
    std::vector<int> group;
    for (int i = 0; i < group_size; ++i) group.push_back(world_rank_of(along(rank_coords(r, dims), i), dims));
    if (group.front() != r) continue;  // each group once, from its first member
    for (const int member : group) {
      if (layout.node_of(member) != layout.node_of(r)) return group;
    }
  }
  return {};
}

std::string ranks_and_hosts(const std::vector<int>& group, const NodeLayout& layout) {
  std::vector<std::string> parts;
  for (const int r : group) parts.push_back(fmt::format("{} on {}", r, layout.host_of(r)));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

void check_node_layout(const ParallelDims& dims, const NodeLayout& layout, bool pp_within_node,
                       const std::string& plan_source, const std::string& launch_source) {
  if (layout.ranks() != dims.world_size()) {
    throw InfeasiblePlan(fmt::format(
        "{}: the plan needs tp*pp*dp = {}*{}*{} = {} ranks, but {} starts {}", plan_source,
        dims.tp, dims.pp, dims.dp, dims.world_size(), launch_source, layout.ranks()));
  }
  const std::vector<int> tp_group = first_crossing_group(
      dims, layout, dims.tp, [](RankCoords c, int i) { c.tp = i; return c; });
  if (!tp_group.empty()) {
    throw InfeasiblePlan(fmt::format(
        "{}: the tensor-parallel group of world ranks {} would span nodes ({}), under {} "
        "({}); a TP group must stay inside a node (its all-reduces run every layer and the "
        "plan prices them on the intra-node link): give each node a multiple of tp = {} ranks",
        plan_source, fmt::join(tp_group, ","), ranks_and_hosts(tp_group, layout), launch_source,
        layout.describe(), dims.tp));
  }
  if (!pp_within_node) return;
  const std::vector<int> pp_group = first_crossing_group(
      dims, layout, dims.pp, [](RankCoords c, int i) { c.pp = i; return c; });
  if (!pp_group.empty()) {
    throw InfeasiblePlan(fmt::format(
        "{}: the pipeline group of world ranks {} would span nodes ({}), under {} ({}), and "
        "--pp-within-node asks for pipelines inside a node",
        plan_source, fmt::join(pp_group, ","), ranks_and_hosts(pp_group, layout), launch_source,
        layout.describe()));
  }
}

}  // namespace strata
