// The checks of a plan that `strata run` makes before any rank starts, as far as the plan
// decides them (not the machine, the files or the data): one function, which run calls and
// which the planner's property test calls on every plan the planner, sizing and select rank
// (tests/planner/runnable_plans_test.cc), so that "the planner ranks only plans that run"
// is tested against what run checks. The placement of ranks on nodes is the other half,
// checked against the real hosts once they are known (executor/comm/node_layout.h).
#pragma once

#include <string>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/train_spec.h"

namespace strata {

// Throws InfeasiblePlan when the plan breaks a rule of the model or the batch
// (Plan::check_against_model), ConfigError when the executor on `backend` does not train
// it (cost_model/specs/backend_facts.h: the layer family, and the backend's head sizes, row widths
// and precision), ProgramDeadlock when its Program, made as the engine makes it
// (executor_program_options with `prefetch_depth`), could hang. Each message starts with
// `source`, which names the plan and the files it was checked against.
void check_plan_runs(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                     Backend backend, int prefetch_depth, const std::string& source);

}  // namespace strata
