// The one training loop of a rank, for `strata run` and every job of `strata select`: step,
// then the validation loss when the run's evaluation schedule says so (the same batches each
// time, engine/validation_loss.h), then the caller's hook (progress lines, metrics,
// checkpoints, the schedule's records). Collective: every rank of the job runs it over the
// same steps. Deliberately not here: what a step's result is written to.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>

#include "cost_model/specs/eval_spec.h"
#include "executor/data/batch.h"
#include "executor/data/token_view.h"
#include "executor/engine/engine.h"
#include "executor/run/rank_training.h"

namespace strata::engine {

// One step of the loop, handed to its hook (which may move the result's events).
struct LoopStep {
  std::int64_t step = 0;  // 0-based: the data of step `step`
  StepResult result;
  std::optional<double> eval_loss;             // the validation loss after this step
  std::chrono::steady_clock::time_point start;  // before the step
};

class RankLoop {
 public:
  // valid_tokens: the validation stream (count 0: none); it must outlive the loop and hold
  // at least seq_len + 1 tokens when eval.has_validation(). The rank must outlive the loop.
  RankLoop(RankTraining& rank, const EvalSpec& eval, data::TokenView valid_tokens);

  bool validates() const { return valid_.has_value(); }

  // Steps [first, end) of the rank's training, stopping before a step when `stop_before`
  // (collective, empty: never) says so. Returns the steps done.
  std::int64_t run(std::int64_t first, std::int64_t end,
                   const std::function<void(LoopStep&)>& after_step,
                   const std::function<bool()>& stop_before = {});

 private:
  RankTraining* rank_;
  EvalSpec eval_;
  std::optional<data::BatchSampler> valid_;
};

}  // namespace strata::engine
