// The validation flags of `strata run` and `strata select` (see eval_options.h).
#include "tools/strata/eval_options.h"

#include <CLI/CLI.hpp>

namespace strata::cli {

EvalOptions add_eval_options(CLI::App& command, EvalSpec& spec) {
  EvalOptions o;
  o.valid_data = command.add_option(
      "--valid-data", spec.valid_data,
      "validation tokens from this file: a Megatron PREFIX(.bin/.idx), an llm.c .bin or raw bytes");
  o.valid_fraction = command.add_option(
      "--valid-fraction", spec.valid_fraction,
      "hold out this last fraction of the training tokens for validation, in [0, 1)");
  o.eval_every = command.add_option("--eval-every", spec.eval_every,
                                    "validation loss every N steps (and after the last; default: "
                                    "after the last only, when there is validation data)");
  o.eval_batches = command.add_option("--eval-batches", spec.eval_batches,
                                      "global batches per validation (default 4)");
  return o;
}

}  // namespace strata::cli
