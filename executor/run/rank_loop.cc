// A rank's training loop (see rank_loop.h).
#include "executor/run/rank_loop.h"

#include "executor/engine/validation_loss.h"

namespace strata::engine {

RankLoop::RankLoop(RankTraining& rank, const EvalSpec& eval, data::TokenView valid_tokens)
    : rank_(&rank), eval_(eval) {
  if (eval.has_validation() && valid_tokens.count > 0) {
    valid_.emplace(valid_tokens, rank.train().seed, rank.model().seq_len,
                   data::SampleStream::kValidation);
  }
}

std::int64_t RankLoop::run(std::int64_t first, std::int64_t end,
                           const std::function<void(LoopStep&)>& after_step,
                           const std::function<bool()>& stop_before) {
  const std::int64_t steps = rank_->train().steps;
  std::int64_t s = first;
  for (; s < end; ++s) {
    if (stop_before && stop_before()) break;
    LoopStep done;
    done.step = s;
    done.start = std::chrono::steady_clock::now();
    done.result = rank_->engine().step(s);
    // Every rank evaluates (a collective), after every eval_every steps and after the last.
    if (valid_ && eval_.evaluates_after(s + 1, steps)) {
      done.eval_loss = validation_loss(rank_->engine(), *valid_, eval_.eval_batches);
    }
    after_step(done);
  }
  return s - first;
}

}  // namespace strata::engine
