// What a training run evaluates its validation loss on, and when: tokens from a file of their
// own or the held-out last fraction of the training tokens, averaged over a number of global
// batches, after every N steps and after the last. `strata run`'s flags, `strata select`'s
// flags and a workload's "validation" object all fill this one struct and are checked by the
// one function below, so the three accept and refuse the same values.
// Deliberately not here: opening the data (executor/data/dataset.h), evaluating
// (executor/engine/validation_loss.h).
#pragma once

#include <cstdint>
#include <string>

namespace strata {

struct EvalSpec {
  std::string valid_data;         // validation tokens from this file ("" : none)
  double valid_fraction = 0;      // or the last fraction of the training tokens, held out
  std::int64_t eval_every = 0;    // validation loss every N steps (0: after the last only)
  std::int64_t eval_batches = 4;  // global batches per evaluation

  bool has_validation() const { return !valid_data.empty() || valid_fraction > 0; }
  // Whether the run evaluates after `done` of its `steps` steps: every eval_every steps and
  // after the last, when there is validation data.
  bool evaluates_after(std::int64_t done, std::int64_t steps) const {
    return has_validation() && (done == steps || (eval_every > 0 && done % eval_every == 0));
  }
};

// How messages name each field: a flag ("--valid-fraction") or a file and key path
// ("w.json: validation.fraction").
struct EvalSpecNames {
  std::string valid_data = "--valid-data";
  std::string valid_fraction = "--valid-fraction";
  std::string eval_every = "--eval-every";
  std::string eval_batches = "--eval-batches";
};

// ConfigError naming the field, its value and what was expected unless: valid_fraction in
// [0, 1), not both a file and a fraction, eval_every in [0, limits::kSteps] and only with
// validation data, eval_batches in [1, limits::kGlobalBatch].
void check_eval_spec(const EvalSpec& spec, const EvalSpecNames& names);

}  // namespace strata
