// How much of a step's exposed communication is priced on the inter-node link: the tp, pp
// and dp parts (step_report.h) whose groups span nodes of the cluster, by the time model's
// own rule for each (collectives.h: group_link; a pipeline's hops are all paced by the
// inter-node link once the job spans nodes, time_model.cc). A prediction and a run's report
// both carry it, so `strata compare` shows the inter-node link's share beside each other.
// An approximation where a part mixes links (an inter-node pipeline hop's TP gather runs
// inside the node): the part goes wholly to the link of its group.
#pragma once

#include <optional>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/step_report.h"

namespace strata {

// nullopt when the plan's ranks fit in one node of the cluster (no inter-node link used).
std::optional<double> inter_node_comm_s(const StepTimeParts& parts, const Plan& plan,
                                        const ClusterSpec& cluster);

}  // namespace strata
