// The cost model's front door: predict() turns (model, cluster, train, plan[, profile]) into a
// Prediction (step time and its parts, throughput, memory per tier), and stage_op_times()
// gives every op's start and end for `strata simulate`.
//
// The time half of predict() IS the simulation of the plan's Program (program.h): every op
// priced alone by the time model (op_costs.h) and replayed by program_simulator.h, in
// streams on the CUDA backend and serially on the CPU backend (simulation_mode). The
// pipeline bubble, the in-flight micro-batches, what a prefetch or an overlapped reduction
// hides: nothing of it is a formula here, it is what the replay gives (the closed forms are
// tests of it). The Prediction's parts are the exposed time on the critical rank
// (program_simulator.h), so they add up to the step time and compare with a RunReport's.
//
// The planner prices tens of thousands of plans: it passes a PredictionCache, which keeps
// each pipeline shape's skeleton and replays the plan's distinct ranks only (the first, one
// middle, the last: every middle rank has the same ops and costs), so that a prediction
// costs the pipeline's step ops and no Program generation. The numbers are bitwise those of
// predict() without a cache (tests/cost_model/cost_model_test.cc).
// Deliberately not here: the primitives (compute_model.h, collectives.h, time_model.h), op
// prices (op_costs.h), the replay (program_simulator.h), the memory model (memory_model.h).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/conventions.h"
#include "cost_model/checks/critical_path.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/profile.h"
#include "cost_model/program/program.h"
#include "cost_model/program/program_simulator.h"
#include "cost_model/program/rank_program_cache.h"
#include "cost_model/specs/step_report.h"
#include "cost_model/specs/train_spec.h"

namespace strata {

// How a prediction is made beyond its inputs.
struct CostModelOptions {
  // The kernels' conventions (conventions.h). Unset: the profile's when it has a set, else
  // strata's executor on the cluster's backend (conventions_for).
  std::optional<KernelConventions> conventions;
  // Ranks busy on a node at once when other work shares it (strata select prices a job on
  // one device while the other devices run other jobs); 0: the plan's own ranks.
  std::int64_t node_ranks = 0;
  // `strata run --prefetch-depth`: how far ahead offloaded ZeRO-3 parameters are fetched.
  int prefetch_depth = kDefaultPrefetchDepth;
};
// The conventions a prediction follows (see CostModelOptions::conventions).
KernelConventions conventions_for(const ClusterSpec& cluster, const Profile* profile,
                                  const CostModelOptions& options);
// The device headroom a prediction reserves on every rank (memory_model.h), and whose it is: a
// profile's measured one, else the cluster file's "device_headroom", else the backend's
// measured default (backend_facts.h), so that a plan ranked as fitting leaves the room a run
// takes outside its tensors even on a cluster file that names none.
struct HeadroomChoice {
  DeviceHeadroom headroom;
  std::string whose;  // "the profile's", "the cluster file's", "the CUDA backend's default"
};
HeadroomChoice device_headroom_for(const ClusterSpec& cluster, const Profile* profile);

// Whether a prediction is of strata's own executor: no framework's conventions given by the
// options or the profile (a published run priced as Megatron-LM ran it is not). Then a plan
// is one for `strata run`, and the planner offers only what it accepts (backend_facts.h).
bool predicts_strata_executor(const Profile* profile, const CostModelOptions& options);
// The options of the Program a prediction replays and walks (program.h: program_options):
// the cluster's backend, conventions_for's conventions, the options' prefetch depth.
ProgramOptions predicted_program_options(const ClusterSpec& cluster, const Profile* profile,
                                         const CostModelOptions& options);

// The distinct ranks of a plan's Program (see cost_model.cc): the Programs of the first, a
// middle and the last rank, and which of them each pipeline rank is.
struct RankClasses {
  std::vector<RankProgram> programs;   // [class]
  std::vector<std::int32_t> class_of;  // [pp_rank]
  // deadlock_fault of their Program (a pipeline of min(p, 3) ranks): empty when it cannot hang.
  std::string deadlock;
};

// Work shared by the predictions of many plans, each piece keyed by exactly what it depends
// on: each pipeline shape's skeleton (schedule, p, v, m); each rank-class Program (the
// model's shape, t, min(p, 3), v, the schedule kind, ZeRO stage, offload, recomputation,
// sequence parallelism, the Program's options); each pipeline replay's end (the skeleton and
// the bytes of every duration the replay reads: replay_key). Owned by the caller (the
// planner: one per search), not thread-safe.
class PredictionCache {
 public:
  const PipelineSkeleton& skeleton(ScheduleKind kind, std::int64_t pp, std::int64_t v,
                                   std::int64_t m);
  // Throws ProgramDeadlock (program_check.h) when the pipeline of that shape or the rank
  // classes' Program could hang: between them they hold every op of the plan's Program (the
  // skeleton every cross-rank message, the classes every body and tail). Each shape and
  // each class set is checked once.
  void check_deadlock_free(ScheduleKind kind, std::int64_t pp, std::int64_t v, std::int64_t m,
                           const RankClasses& classes);
  const RankClasses& rank_classes(const ModelSpec& model, const TrainSpec& train,
                                  const Plan& plan, const ProgramOptions& options);
  // The pipeline's end of a replay, replayed only when these inputs are new.
  double pipeline_end(const PipelineSkeleton& skeleton, const std::vector<PricedRank>& ranks,
                      const std::vector<std::int32_t>& class_of, SimulationMode mode);

  std::size_t shapes() const { return skeletons_.size(); }
  std::size_t replays() const { return replays_; }        // replayed
  std::size_t replay_hits() const { return replay_hits_; }  // answered from the cache

 private:
  std::map<std::array<std::int64_t, 4>, PipelineSkeleton> skeletons_;
  std::map<std::array<std::int64_t, 4>, std::string> skeleton_faults_;  // deadlock_fault
  std::map<std::vector<std::int64_t>, RankClasses> classes_;
  std::unordered_map<std::string, double> ends_;
  ReplayScratch scratch_;
  std::size_t replays_ = 0, replay_hits_ = 0;
};

// What the cost model reads of a TrainSpec: the global batch, the precision and the
// optimizer's kind (the size of its state), nothing else: its hyperparameters, seed, step
// count and learning-rate schedule are reset to the defaults. Two trains with the same
// priced_train give the same Prediction for any plan (tested), so `strata select` prices a
// grid's learning rates and seeds once.
TrainSpec priced_train(const TrainSpec& train);

// The prediction of one training step. Throws InfeasiblePlan if plan.check() fails.
// With a Profile, measured GEMM/elementwise/collective rates replace the default curves.
Prediction predict(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                   const Plan& plan, const Profile* profile = nullptr);
Prediction predict(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                   const Plan& plan, const Profile* profile, const CostModelOptions& options);
// The same through a cache (bitwise the same Prediction).
Prediction predict(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                   const Plan& plan, const Profile* profile, const CostModelOptions& options,
                   PredictionCache& cache);

// The two halves of predict(), for the planner, which prices the time of the plans that
// fit only. Memory: the kind, label, memory per tier and rank and offload bytes. Step time:
// predict()'s step_time_s, the very same number, without its parts (cheaper: no timeline).
// Neither checks the plan: predict() does (plan.check first).
// The planner's choices: kWorstOnly estimates only the ranks that can be the worst
// (MemoryModelOptions::every_rank; memory_bytes is the same, per_rank lists those ranks
// alone), and `programs` reuses the ranks' Programs across candidates.
enum class MemoryRanks { kEvery, kWorstOnly };
Prediction predict_memory(const ModelSpec& model, const ClusterSpec& cluster,
                          const TrainSpec& train, const Plan& plan, const Profile* profile,
                          const CostModelOptions& options = {},
                          MemoryRanks ranks = MemoryRanks::kEvery,
                          RankProgramCache* programs = nullptr);
// A lower bound of predict_memory(...).memory_bytes.device without making or walking any
// rank's Program (memory_floor.h: why it is one): a planner may drop the plans whose floor
// already exceeds the device before it walks them. 0 where the estimate walks nothing.
double predict_device_memory_floor(const ModelSpec& model, const ClusterSpec& cluster,
                                   const TrainSpec& train, const Plan& plan,
                                   const Profile* profile, const CostModelOptions& options = {});
double predict_step_time(const ModelSpec& model, const ClusterSpec& cluster,
                         const TrainSpec& train, const Plan& plan, const Profile* profile,
                         const CostModelOptions& options, PredictionCache& cache);
// A lower bound of that step time without replaying the pipeline (pipeline_lower_bound +
// the longest tail): a planner may skip the plans whose bound is already slower than the
// plans it keeps.
double predict_step_time_bound(const ModelSpec& model, const ClusterSpec& cluster,
                               const TrainSpec& train, const Plan& plan, const Profile* profile,
                               const CostModelOptions& options, PredictionCache& cache);
// The throughput fields of a prediction from its step time: tokens/s, TFLOP/s per GPU (Megatron's
// F), MFU (model FLOPs without recomputation over the train precision's peak).
void fill_throughput(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                     const Plan& plan, const Profile* profile, Prediction& prediction);

// The critical path of the plan's step (critical_path.h), from the Program predict()
// replays, priced the same way, beside the replay's step time (the path's length equals it to
// rounding). Throws InfeasiblePlan, ProgramDeadlock.
struct StepCriticalPath {
  Program program;
  SimulationMode mode = SimulationMode::kStreams;
  double simulated_step_s = 0;  // simulate_step's
  CriticalPath path;
};
StepCriticalPath step_critical_path(const ModelSpec& model, const ClusterSpec& cluster,
                                    const TrainSpec& train, const Plan& plan,
                                    const Profile* profile = nullptr,
                                    const CostModelOptions& options = {},
                                    std::size_t off_path = 8);

// The plan's Program replayed op by op (`strata simulate`): the Program, how it was run,
// and every op's start and end with the step's figures (those of predict()). Throws
// InfeasiblePlan.
struct StageOpTimes {
  Program program;
  SimulationMode mode = SimulationMode::kStreams;
  ProgramTimeline timeline;
};
StageOpTimes stage_op_times(const ModelSpec& model, const ClusterSpec& cluster,
                            const TrainSpec& train, const Plan& plan,
                            const Profile* profile = nullptr,
                            const CostModelOptions& options = {});

}  // namespace strata
