// Workload: many training jobs to run together for model selection (Hydra, Saturn): each job a
// model, a training setup and a number of steps, optionally with a grid over training
// settings that expands into one job per point (lr x global batch, the usual search).
// Strict JSON like every config:
//   {"name": "tiny-grid", "source": "...",
//    "jobs": [{"name": "tiny", "model": "tiny", "train": "tiny", "steps": 30,
//              "grid": {"lr": [1e-3, 3e-4], "global_batch": [8, 16]}}, ...]}
// "model" and "train" are references (a bundled name or a path), resolved by the caller's
// resolver (the tools know where configs live; cost_model does no file lookup of its own).
// Grid keys: lr, global_batch, seed, weight_decay; each a non-empty list. The expanded jobs
// are named "<name> lr=<lr> gb=<global batch> ..." in the grid's key order, then the values'.
// Optional at the top: "cluster" (a reference, bundled name or path, that the grid was written
// for) and "validation": {"data": FILE | "fraction": F, "eval_every": N, "eval_batches": B},
// the same settings as `strata run --valid-data/--valid-fraction/--eval-every/--eval-batches`
// (cost_model/specs/eval_spec.h), checked on load.
// Deliberately not here: how the jobs run (planner/select, executor/select).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cost_model/specs/eval_spec.h"
#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/train_spec.h"

namespace strata {

struct GridAxis {
  std::string key;              // "lr" | "global_batch" | "seed" | "weight_decay"
  std::vector<double> values;   // integers for global_batch and seed
};

struct WorkloadJobSpec {
  std::string name;
  std::string model;  // reference
  std::string train;  // reference
  std::int64_t steps = 0;
  std::vector<GridAxis> grid;
};

struct WorkloadSpec {
  std::string name;
  std::optional<std::string> cluster;    // reference; unset: the workload names none
  std::optional<EvalSpec> validation;    // valid_data as written (a reference, unresolved)
  std::vector<WorkloadJobSpec> jobs;

  static WorkloadSpec from_json(const Json& json, const std::string& source);
  static WorkloadSpec load(const std::string& path);
};

// One job of the expanded workload.
struct Job {
  std::string name;
  ModelSpec model;
  TrainSpec train;  // train.steps = the job's steps
  std::string model_ref, train_ref;
};

// Loads a referenced spec; `field` names the workload key for messages ("jobs[1].model").
struct WorkloadResolver {
  std::function<ModelSpec(const std::string& ref, const std::string& field)> model;
  std::function<TrainSpec(const std::string& ref, const std::string& field)> train;
};

// The jobs, grid points expanded in order. Throws ConfigError naming `source` and the key
// when a grid value is out of range for its key (a non-integer or < 1 global batch, lr <= 0).
std::vector<Job> expand(const WorkloadSpec& workload, const WorkloadResolver& resolve,
                        const std::string& source);

}  // namespace strata
