// Which node each world rank of a job runs on, and the one check of a plan's rank layout
// across nodes.
//
// World ranks follow Megatron's order (cost_model/specs/partition.h: tp fastest, then dp, then
// pp), and launchers fill nodes by slot: mpirun's default mapping with a hostfile, srun's
// block distribution and `strata run --nodes N --ranks-per-node K` all put ranks
// 0..K-1 on the first node, K..2K-1 on the next. So a TP group (t consecutive ranks) stays
// inside a node when every node's rank count is a multiple of t, and it must: the plan
// prices tensor parallelism on the intra-node link (cost_model/specs/cluster_spec.h), and its
// all-reduces run on every layer. PP groups may cross nodes (their p2p is light); a user
// who wants them inside a node asks for it (`--pp-within-node`). DP groups cross nodes.
// Deliberately not here: where the host names come from (the hostfile, the launcher's
// variables, MPI_Get_processor_name: tools/strata/run.cc), the communicators themselves.
#pragma once

#include <string>
#include <vector>

#include "cost_model/specs/partition.h"

namespace strata {

struct HostSlots {
  std::string host;
  int slots = 1;
};

class NodeLayout {
 public:
  // Ranks filled into hosts in order, `slots` each (mpirun's --map-by slot): fewer slots
  // than ranks is InfeasiblePlan naming the hosts' total and `source` (the hostfile).
  static NodeLayout by_slots(const std::vector<HostSlots>& hosts, int ranks,
                             const std::string& source);
  // `nodes` nodes "node0", "node1", ... of ranks_per_node ranks each.
  static NodeLayout uniform(int nodes, int ranks_per_node);
  // The host of each world rank, as the ranks of a running job report them.
  static NodeLayout from_hosts(const std::vector<std::string>& host_of_rank);

  int ranks() const { return static_cast<int>(node_of_rank_.size()); }
  int nodes() const { return static_cast<int>(hosts_.size()); }
  int node_of(int world_rank) const { return node_of_rank_.at(static_cast<size_t>(world_rank)); }
  const std::string& host_of(int world_rank) const { return hosts_.at(static_cast<size_t>(node_of(world_rank))); }
  const std::string& host(int node) const { return hosts_.at(static_cast<size_t>(node)); }
  // This rank's index among the ranks of its node (the GPU it takes, modulo the node's GPUs).
  int local_rank(int world_rank) const;
  // "a: ranks 0-1, b: ranks 2-3" (for messages).
  std::string describe() const;

 private:
  std::vector<std::string> hosts_;  // distinct, in order of their first rank
  std::vector<int> node_of_rank_;
};

// The plan's dims against the launch, before any work: InfeasiblePlan naming the plan
// (`plan_source`) and the launch (`launch_source`, e.g. "mpirun -np 3" or the hostfile)
// when the rank counts differ, when a TP group spans nodes, or (pp_within_node) when a PP
// group does. The message names the group's ranks and their hosts.
void check_node_layout(const ParallelDims& dims, const NodeLayout& layout, bool pp_within_node,
                       const std::string& plan_source, const std::string& launch_source);

}  // namespace strata
