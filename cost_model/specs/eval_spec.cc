// The one check of validation settings (see eval_spec.h).
#include "cost_model/specs/eval_spec.h"

#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/limits.h"

namespace strata {

void check_eval_spec(const EvalSpec& s, const EvalSpecNames& names) {
  if (!(s.valid_fraction >= 0 && s.valid_fraction < 1)) {
    throw ConfigError(fmt::format("{}: value {}, expected a fraction in [0, 1)",
                                  names.valid_fraction, s.valid_fraction));
  }
  if (s.valid_fraction > 0 && !s.valid_data.empty()) {
    throw ConfigError(fmt::format("{} and {}: give one source of validation data, not both",
                                  names.valid_fraction, names.valid_data));
  }
  if (s.eval_every < 0 || s.eval_every > limits::kSteps) {
    throw ConfigError(fmt::format("{}: value {}, expected an integer in [0, {}]", names.eval_every,
                                  s.eval_every, limits::kSteps));
  }
  if (s.eval_batches < 1 || s.eval_batches > limits::kGlobalBatch) {
    throw ConfigError(fmt::format("{}: value {}, expected an integer in [1, {}]",
                                  names.eval_batches, s.eval_batches, limits::kGlobalBatch));
  }
  if (s.eval_every > 0 && !s.has_validation()) {
    throw ConfigError(fmt::format("{}: needs validation data ({} FILE or {} F)", names.eval_every,
                                  names.valid_data, names.valid_fraction));
  }
}

}  // namespace strata
