// "Why is it slow", answered with what to change: the single changes of a plan that the cost
// model prices, each kept only when it still passes Plan::check, fits in memory and (for
// strata's executor) is one `strata run` accepts, and the one that gains most.
//   micro-batches  the micro-batch halved (twice the micro-batches: a smaller fill and drain)
//   uneven split   the first and the last (virtual) pipeline stage given other layer counts
//                  than the rest (Plan::first_stage_layers / last_stage_layers): the few
//                  splits stage_balance.h estimates balance the stages best, each priced
//   recompute      a cheaper recomputation (full -> selective -> none)
//   offload        each offloaded state brought back to the device
// Deterministic (levers in this order, ties to the first). No printing.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/plan.h"

namespace strata {

struct Lever {
  std::string name;    // "micro-batches", "uneven split", "recompute", "offload"
  std::string change;  // what changes, e.g. "first stage 5 layers, last 1 (the others 7)"
  Plan plan;
  double tokens_per_s = 0;
};

// Every lever that applies to `plan` and runs, with its best variant's throughput; sorted by
// throughput, highest first. Predictions with `profile` and `options` (as the plan's own).
std::vector<Lever> plan_levers(const ModelSpec& model, const ClusterSpec& cluster,
                               const TrainSpec& train, const Plan& plan, const Profile* profile,
                               const CostModelOptions& options);

// "the lever that would gain most: uneven split (first stage 5 layers, ...), +21.3% tokens/s;
// then recompute +2.0%": the best lever against `tokens_per_s`, or that none gains.
std::string lever_line(const std::vector<Lever>& levers, double tokens_per_s);

}  // namespace strata
