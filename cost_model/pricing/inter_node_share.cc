// The inter-node link's share of a step's exposed communication; see inter_node_share.h.
#include "cost_model/pricing/inter_node_share.h"

#include "cost_model/pricing/collectives.h"

namespace strata {

std::optional<double> inter_node_comm_s(const StepTimeParts& parts, const Plan& plan,
                                        const ClusterSpec& cluster) {
  if (plan.world_size() <= cluster.gpus_per_node) return std::nullopt;
  // Megatron order (partition.h): a TP group is t consecutive ranks, a DP group d ranks t
  // apart, and the pipeline spans the whole job.
  const auto inter = [&](std::int64_t ranks, std::int64_t stride) {
    return group_link(cluster, ranks, stride, plan.world_size()) == LinkClass::kInterNode;
  };
  double seconds = 0;
  if (inter(plan.tp, 1)) seconds += parts.tp_comm_s;
  if (inter(plan.dp, plan.tp)) seconds += parts.dp_comm_s;
  if (plan.pp > 1 && inter(plan.world_size(), 1)) seconds += parts.pp_comm_s;
  return seconds;
}

}  // namespace strata
