// Runs a multi-model schedule (cost_model/specs/select_schedule.h, made by planner/select.h) on D devices from one process: one worker
// thread per device (CPU backend: each with one kernel thread; CUDA: worker d drives GPU d)
// and, per job rank, its own budgeted allocator. A job's ranks are threads of its own LocalWorld
// (executor/comm/local_communicator.h), built when the job's first slice starts on its
// devices, and they keep the job's state between its slices; the one engine replays the
// job's Program, so a job computes exactly what `strata run` computes for the same plan,
// whichever devices and turns the schedule gives it. A spilled job keeps its state in the
// host tier and its device holds nothing of it between steps.
//
// Order: every worker runs its device's slices in the schedule's order; a slice waits for
// the job's earlier slices (which start earlier, so the wait is never circular). The
// measured times are wall-clock seconds since the run's start.
// Deliberately not here: choosing the schedule (planner/select.h), printing and files.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/eval_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/workload.h"
#include "cost_model/specs/select_schedule.h"
#include "executor/data/token_view.h"
#include "executor/engine/backend.h"

namespace strata::select {

// A validation loss of a job: after `step` of its steps (1-based).
struct EvalPoint {
  std::int64_t step = 0;
  double loss = 0;
};

struct JobRun {
  std::vector<double> losses;  // per step
  std::vector<EvalPoint> evals;  // in step order; the last after the job's last step
  std::vector<double> step_s;  // per step
  double start_s = -1;         // the first step's start
  double end_s = 0;            // the last step's end
  double peak_device_bytes = 0;  // the largest peak of any of its ranks
};

struct MeasuredSlice {
  std::size_t job = 0;
  std::int64_t device = 0;
  std::int64_t first_step = 0, steps = 0;
  double start_s = 0, end_s = 0;
};

struct SelectRun {
  std::vector<JobRun> jobs;
  std::vector<MeasuredSlice> slices;  // one per (slice, device), in completion order
  double makespan_s = 0;
  std::vector<double> device_busy_s;  // [device]
};

struct Progress {
  std::size_t job = 0;
  std::int64_t step = 0;   // 1-based, of the job's steps
  double loss = 0;
  std::optional<double> eval_loss;  // the validation loss after this step, when evaluated
  double step_s = 0;       // this step's measured time
  double job_eta_s = 0;    // the job's remaining steps at its measured pace
  double elapsed_s = 0;
};

// A job's tokens (views of a data::TokenStreams the caller keeps for the run): what it trains
// on and, when the run validates, what it validates on.
struct JobTokens {
  data::TokenView train;
  data::TokenView valid;  // count 0: none
};

struct RunOptions {
  double device_budget_bytes = 0;  // > 0: each job rank's device budget instead of the cluster's
  std::vector<JobTokens> tokens;   // [job]
  // When eval.has_validation(): every job's validation loss after eval.evaluates_after() of
  // its steps, the mean of eval.eval_batches batches (engine/validation_loss.h), as `strata
  // run` does; each job's tokens.valid must hold at least seq_len + 1 tokens.
  EvalSpec eval;
  // Each job rank's backend on its worker's device (empty: the CPU backend, one kernel thread
  // a worker); the CUDA one is cuda::cuda_backend_maker().
  engine::BackendMaker make_backend;
  std::function<void(const Progress&)> progress;  // called by the job's rank 0 after each step
  // A worker that fails cannot be unwound alone: its job's other ranks wait in a collective
  // forever. So the first failure is handed to `fatal` (print it, end the process), then the
  // process terminates. Every input is checked before the run, so this is for faults.
  std::function<void(std::exception_ptr)> fatal;
};

// plans[j]: the plan of job j's way (its world size = the devices of its slices). Throws the
// first error any worker met (after every worker has stopped).
SelectRun run_schedule(const std::vector<Job>& jobs, const std::vector<Plan>& plans,
                       const SelectSchedule& schedule, std::int64_t devices,
                       const ClusterSpec& cluster, const RunOptions& options);

}  // namespace strata::select
