// Folding a measured run into a Profile (`strata run --update-profile`): the loop's feedback.
//
// The rates of a Profile are microbenchmarks: one kernel, or one collective, in a loop, hot
// caches, every rank ready at once. A training step runs the kernels back to back over a
// larger working set, its collectives wait for the slowest rank, and on a shared machine its
// speed drifts (on the 2-core VM of the CI, for seconds to minutes at a time, a process runs
// ~25% slower or faster, and two busy vCPUs slow each other by 1.0x to 1.6x, as the host
// places them). Four factors of the Profile carry what the microbenchmarks miss, each fitted
// from the runs that isolate it:
//   compute_time_scale   every compute time of a prediction (compute_model.h), from runs of
//                        one rank (one busy core, no communication): the factor that
//                        predicts the measured median step;
//   comm_time_scale      every collective and point-to-point time (collectives.h), from runs
//                        of several ranks, one per core, without a pipeline, whose
//                        communication is at least kMinCommShare of the step as the
//                        microbenchmarks predict it: the factor that predicts the measured
//                        communication parts (a step's collectives also wait for the slowest
//                        rank, which no microbenchmark sees);
//   busy_cores_slowdown  the compute time when every core of a node is busy against one
//                        alone (compute_model.h), from every run of several ranks, one per
//                        core, with the other factors held: the value that predicts the step
//                        (below 1 too: on this VM, two busy ranks sometimes each run faster
//                        than one alone);
//   time_sliced_sync_s   the wait of each blocking collective or transfer of ranks that
//                        time-share the cores (time_model.h), from runs of more ranks than
//                        cores, the others held: the value that predicts the step.
// Bisection in log space (every prediction is monotone in each factor), over
// [kMinTimeScale, kMaxTimeScale] for the factors and [kMinSyncS, kMaxSyncS] for the wait.
// Each factor comes from its own runs only: a run never moves another kind's factor.
// Why a pipeline's communication is not fitted: its measured comm parts hold the stages'
// waits for each other (the embedding sync waits for the last stage), which the model books
// as bubble.
//
// Each factor is the interquartile geometric mean of what the last kFeedbackWindow runs of
// its kind asked for (the Profile keeps the list; the calibration's busy_cores_slowdown is
// its first entry): the lowest and the highest quarter dropped, the geometric mean of the
// rest. Why trimmed, over a long window: on the shared VM one run in five or so asks for
// 2-3x the typical comm factor (a peer descheduled mid-collective), and the speed modes last
// minutes; a plain mean would follow the last stray run, a short window the last mode. Why
// not the median: a run lands in a slow mode (~1.3x) about one time in three, and what the
// loop checks against is a trimmed mean over runs; the median would pick the fast mode
// alone. A machine that really changed is recalibrated (a calibration starts the lists
// afresh).
//
// Deliberately not here: running or predicting (the caller passes the prediction as a
// function of the profile), reading or writing the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "cost_model/specs/profile.h"
#include "cost_model/specs/step_report.h"

namespace strata {

inline constexpr double kMinTimeScale = 0.125;
inline constexpr double kMaxTimeScale = 8.0;
inline constexpr double kMinSyncS = 1e-7;
inline constexpr double kMaxSyncS = 1e-2;
inline constexpr std::size_t kFeedbackWindow = 32;
// Communication must be this share of a step (as the microbenchmarks predict it) for a run to
// fit the comm factor: below, a few microseconds of timer and wait noise per collective would
// swing the factor.
inline constexpr double kMinCommShare = 0.01;

// One factor's update.
struct ScaleUpdate {
  bool fitted = false;
  double run_scale = 0;  // what this run alone asks for (clamped to the range)
  double old_scale = 1;  // (1 when never fitted; 0 for the wait)
  double new_scale = 1;
  std::size_t runs = 0;  // runs the new factor is the trimmed mean of
};

struct FeedbackFit {
  double measured_step_s = 0;
  double predicted_step_s = 0;  // with the profile as it was
  ScaleUpdate compute;
  ScaleUpdate busy_cores;  // busy_cores_slowdown
  ScaleUpdate comm;
  ScaleUpdate time_sliced;  // time_sliced_sync_s, in seconds
};

// The geometric mean of asks without the lowest and the highest floor(n / 4); 0 when empty.
double interquartile_mean_ask(std::vector<double> asks);

// The communication parts: tensor-, pipeline- and data-parallel.
double comm_parts_s(const StepTimeParts& parts);

// Where the run ran: the cores its ranks kept busy on one node (ranks per node x threads per
// rank) and the node's cores.
struct RunPlacement {
  std::int64_t busy_cores = 1;
  std::int64_t node_cores = 1;
};

// Updates the profile's factors from one run (compute; time-sliced wait; or comm and busy
// cores). `measured` is the run's report,
// `predict(p)` the prediction of the run's plan with profile p. Throws ConfigError when the
// measured step is not a positive number.
FeedbackFit fold_run_into_profile(Profile& profile, const StepReport& measured,
                                  const RunPlacement& placement,
                                  const std::function<StepReport(const Profile&)>& predict);

}  // namespace strata
