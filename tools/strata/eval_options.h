// --valid-data, --valid-fraction, --eval-every and --eval-batches: the validation flags of
// `strata run` and `strata select`, bound to an EvalSpec (cost_model/specs/eval_spec.h) with one
// help text, so the two commands read them alike.
#pragma once

#include "tools/strata/cli_fwd.h"

#include "cost_model/specs/eval_spec.h"

namespace strata::cli {

// The four options, each as given on the command line (count() > 0 when it was).
struct EvalOptions {
  CLI::Option* valid_data = nullptr;
  CLI::Option* valid_fraction = nullptr;
  CLI::Option* eval_every = nullptr;
  CLI::Option* eval_batches = nullptr;
};

EvalOptions add_eval_options(CLI::App& command, EvalSpec& spec);

}  // namespace strata::cli
