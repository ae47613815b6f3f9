// Uneven pipeline splits that balance the stages (Plan::first_stage_layers /
// last_stage_layers, with any v): the first pipeline stage also runs the embedding and the
// last one the final norm, the output layer and the loss, so with an even split the last is
// the busiest and the others wait on it (GPT-2 1.5B on a pipeline of 8: 51% over the mean).
// Llama 3 405B was trained with the first and last stage one layer short for that reason.
//
// From an even plan's per-rank busy times (Prediction::pipeline_idle) this estimates a
// layer's time and the first and last stage's extra work, and orders every legal split by
// the busiest rank it would give; the caller prices the few best with predict() and keeps
// one only if it is faster than the even split. The estimate: t, a layer's time, from the
// middle ranks (p > 2; with p = 2 the first rank's, taking the embedding as free, which it
// nearly is: a table lookup), the extras as what the first and last rank spend beyond their
// layers. Deterministic; no pricing here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"

namespace strata {

// The legal uneven variants of `even` (pipeline_violation empty, at least one layer a
// stage) estimated to balance better than it, the `count` with the least estimated busiest
// rank first. Empty when `even` has no
// pipeline, is already uneven, or `stage_busy_s` is not one time per pipeline rank.
std::vector<Plan> balanced_splits(const ModelSpec& model, const Plan& even,
                                  const std::vector<double>& stage_busy_s, std::size_t count);

// "first stage 5 layers, last 1 (the others 7)"; "first virtual stage ..." with v > 1.
std::string split_description(const ModelSpec& model, const Plan& plan);

// How many of balanced_splits' candidates the planner and the lever price.
inline constexpr std::size_t kBalancedSplitsPriced = 3;

}  // namespace strata
