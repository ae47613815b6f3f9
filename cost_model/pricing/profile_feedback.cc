// The loop's feedback: one run folded into the profile's factors (profile_feedback.h).
#include "cost_model/pricing/profile_feedback.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata {
namespace {

// The factor s in [min_s, max_s] with value(s) = target, value increasing in s; clamped at
// the ends. 40 halvings of at most log(64) ~ 4.2: s to ~4e-12 relative.
double solve_scale(const std::function<double(double)>& value, double target,
                   double min_s = kMinTimeScale, double max_s = kMaxTimeScale) {
  double lo = std::log(min_s), hi = std::log(max_s);
  if (value(min_s) >= target) return min_s;
  if (value(max_s) <= target) return max_s;
  for (int i = 0; i < 40; ++i) {
    const double mid = 0.5 * (lo + hi);
    (value(std::exp(mid)) < target ? lo : hi) = mid;
  }
  return std::exp(0.5 * (lo + hi));
}

// Appends run_scale to asks (dropping the oldest past kFeedbackWindow) and sets scale to
// their interquartile geometric mean. `unfitted` is what a scale of 0 (never fitted) stands
// for. A scale set without asks (by hand) counts as one ask.
ScaleUpdate fold_ask(double& scale, std::vector<double>& asks, double run_scale,
                     double unfitted = 1.0) {
  ScaleUpdate u;
  u.fitted = true;
  u.run_scale = run_scale;
  u.old_scale = scale > 0 ? scale : unfitted;
  if (asks.empty() && scale > 0) asks.push_back(scale);
  asks.push_back(run_scale);
  if (asks.size() > kFeedbackWindow) {
    asks.erase(asks.begin(), asks.end() - static_cast<std::ptrdiff_t>(kFeedbackWindow));
  }
  u.new_scale = interquartile_mean_ask(asks);
  u.runs = asks.size();
  scale = u.new_scale;
  return u;
}

}  // namespace

double interquartile_mean_ask(std::vector<double> asks) {
  if (asks.empty()) return 0.0;
  std::sort(asks.begin(), asks.end());
  const std::size_t drop = asks.size() / 4;
  double log_sum = 0;
  for (std::size_t i = drop; i < asks.size() - drop; ++i) log_sum += std::log(asks[i]);
  return std::exp(log_sum / static_cast<double>(asks.size() - 2 * drop));
}

double comm_parts_s(const StepTimeParts& p) { return p.tp_comm_s + p.pp_comm_s + p.dp_comm_s; }

FeedbackFit fold_run_into_profile(Profile& profile, const StepReport& measured,
                                  const RunPlacement& placement,
                                  const std::function<StepReport(const Profile&)>& predict) {
  const double step_s = measured.step_time_s;
  if (!(step_s > 0) || !std::isfinite(step_s)) {
    throw ConfigError(fmt::format(
        "--update-profile: the measured step time must be > 0 s, got {}", step_s));
  }
  FeedbackFit fit;
  fit.measured_step_s = step_s;
  const StepReport before = predict(profile);
  fit.predicted_step_s = before.step_time_s;
  Profile trial = profile;
  const auto step_at = [&](auto set) {
    return [&, set](double s) {
      set(trial, s);
      return predict(trial).step_time_s;
    };
  };
  if (placement.busy_cores > placement.node_cores) {
    const double run =
        solve_scale(step_at([](Profile& p, double s) { p.time_sliced_sync_s = s; }), step_s,
                    kMinSyncS, kMaxSyncS);
    fit.time_sliced =
        fold_ask(profile.time_sliced_sync_s, profile.time_sliced_sync_asks, run, 0.0);
    return fit;
  }
  if (placement.busy_cores <= 1) {
    const double run = solve_scale(
        step_at([](Profile& p, double s) { p.compute_time_scale = s; }), step_s);
    fit.compute = fold_ask(profile.compute_time_scale, profile.compute_time_scale_asks, run);
    return fit;
  }
  // Several ranks, one per core. Without a pipeline, the run's communication is measured
  // directly (its comm parts): the comm factor that predicts them. Whether the run
  // communicates enough to tell is decided on the microbenchmarks alone (the factors
  // neutral), so that no factor fitted so far changes which runs fit it.
  Profile neutral = profile;
  neutral.compute_time_scale = 0;
  neutral.comm_time_scale = 0;
  const StepReport raw = predict(neutral);
  const double measured_comm_s = comm_parts_s(measured.parts);
  if (raw.parts.bubble_s == 0 && comm_parts_s(raw.parts) >= kMinCommShare * raw.step_time_s &&
      measured_comm_s > 0) {
    const double run = solve_scale(
        [&](double s) {
          trial.comm_time_scale = s;
          return comm_parts_s(predict(trial).parts);
        },
        measured_comm_s);
    fit.comm = fold_ask(profile.comm_time_scale, profile.comm_time_scale_asks, run);
  }
  // Then, the comm factor held, the busy-cores slowdown that predicts the step.
  // The slowdown is recorded at the node's cores; a calibration measured at another count
  // (or none) starts the average afresh.
  if (profile.busy_cores != placement.node_cores) {
    profile.busy_cores = placement.node_cores;
    profile.busy_cores_slowdown = 0;
    profile.busy_cores_slowdown_asks.clear();
  }
  trial = profile;
  const double run = solve_scale(
      step_at([](Profile& p, double s) { p.busy_cores_slowdown = s; }), step_s);
  fit.busy_cores =
      fold_ask(profile.busy_cores_slowdown, profile.busy_cores_slowdown_asks, run);
  return fit;
}

}  // namespace strata
