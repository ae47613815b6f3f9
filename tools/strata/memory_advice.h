// What to change when a plan does not fit in memory, told from the rank's memory by kind
// (cost_model/specs/memory_kinds.h): the largest kind on the device and the plan changes that
// shrink it. One place for `plan`'s, `predict`'s and `run`'s out-of-memory messages.
#pragma once

#include <string>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/step_report.h"

namespace strata::cli {

// "the largest kind on the device is activations, 1.20 GiB of 2.81 GiB (43%); to shrink it:
// recompute selective, micro_batch 1, ..." -- the changes that apply to this plan, in the
// order they cost least throughput. On the CPU backend it ends with the --device-budget-mib
// that holds the predicted peak. Empty when the rank has no kinds (a report written before
// them).
std::string memory_advice(const RankMemory& worst, const Plan& plan, const ClusterSpec& cluster);

}  // namespace strata::cli
