// strata run's checks of a plan (see plan_checks.h).
#include "executor/runtime/plan_checks.h"

#include <fmt/format.h>

#include "cost_model/specs/backend_facts.h"
#include "cost_model/specs/errors.h"
#include "cost_model/program/program.h"
#include "cost_model/checks/program_check.h"

namespace strata {

void check_plan_runs(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                     Backend backend, int prefetch_depth, const std::string& source) {
  plan.check_against_model(model, train, source);
  // Refused here, once, naming the model and the plan, rather than at every rank's set-up.
  if (const std::string why = executor_family_violation(model); !why.empty()) {
    throw ConfigError(fmt::format("{}: strata run cannot train family \"{}\": {} (strata plan, "
                                  "predict and simulate price it)",
                                  source, model.family_name(), why));
  }
  const BackendFacts& facts = backend_facts(backend);
  if (const std::string why = backend_violation(facts, model, train, plan.tp); !why.empty()) {
    throw ConfigError(fmt::format("{}: {}{}", source, why,
                                  backend == Backend::kCpu ? "" : " (use --backend cpu)"));
  }
  // The Program every rank will replay cannot hang (program_check.h): refused here, not
  // ended by the watchdog after --comm-timeout-s.
  try {
    check_deadlock_free(
        make_program(model, train, plan, executor_program_options(backend, prefetch_depth)));
  } catch (const ProgramDeadlock& e) {
    throw ProgramDeadlock(fmt::format("{}: {}", source, e.what()));
  }
}

}  // namespace strata
