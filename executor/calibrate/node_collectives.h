// Collectives of a job across nodes (`strata calibrate --hostfile` / `--nodes N
// --ranks-per-node K`): which ranks measure each link, and the measurement itself.
//
// The two links of a profile (cost_model/pricing/collectives.h) are measured by two groups of one
// job, one after the other:
//   intra_node: every rank of the first node holding two or more ranks (shared memory or
//               NVLink, what a TP group uses);
//   inter_node: the first rank of each node, one per node (each rank's traffic through its
//               node's network: what a DP group across nodes sees per rank, the figure the
//               time model's inter-node link is). p2p is a 2-rank ping-pong: with two
//               nodes the group's own; with three or more, each hop of the ring of the
//               nodes' first ranks (node i to node i+1, the last to the first) timed alone,
//               one after the other, and the slowest hop's fit is the profile's (a pipeline
//               across nodes is paced by its slowest hop, cost_model/pricing/time_model.cc).
// The ranks outside the group measuring wait in a barrier that sleeps between polls: an MPI
// barrier spins, and on nodes with fewer cores than ranks (the CI's simulated nodes) the
// spinning ranks would take the cores of the ranks being timed.
// Deliberately not here: launching the job (tools/strata/calibrate.cc), the fits
// (collective_bench.h), where a rank's host comes from (the caller's NodeLayout).
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "cost_model/specs/profile.h"
#include "executor/calibrate/collective_bench.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/comm/node_layout.h"

namespace strata::calibrate {

// World ranks of each link's group; empty when the layout has none (no node with two ranks;
// one node).
struct NodeLinkGroups {
  std::vector<int> intra_node;
  std::vector<int> inter_node;
  // Three nodes or more: the ring's hops over inter_node's ranks, {a, b} with a's node before
  // b's (the last hop wraps to the first node); empty otherwise.
  std::vector<std::pair<int, int>> inter_node_hops;
};
NodeLinkGroups node_link_groups(const NodeLayout& layout);

// Every rank of `world` calls it with the same layout (layout.ranks() == world.size(), else
// std::invalid_argument). Returns, on every rank, the fits of the intra-node group then the
// inter-node group (each as measure_collectives makes them, options.link set per group; the
// inter-node p2p from its hops when it has any); a link without a group is absent. `progress(link)` is called on world rank 0 before each
// link is measured (may be empty).
std::vector<CollectiveFit> measure_node_links(
    MpiCommunicator& world, const NodeLayout& layout, const CollectiveBenchOptions& options,
    const std::function<void(LinkClass)>& progress = {});

}  // namespace strata::calibrate
