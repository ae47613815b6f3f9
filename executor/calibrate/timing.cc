// Median-of-repeats timing; see timing.h.
#include "executor/calibrate/timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

namespace strata::calibrate {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> values) {
  if (values.empty()) throw std::invalid_argument("median of no values");
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

double median_call_seconds(const std::function<void()>& fn, const TimingOptions& options) {
  const double w0 = now_s();
  fn();  // warm-up: page faults, BLAS thread start, caches
  const double warmup_s = std::max(now_s() - w0, 1e-9);
  // Calls per repeat so that a repeat lasts about min_repeat_s (at least one, at most 10^6).
  const auto calls = static_cast<std::int64_t>(
      std::clamp(std::ceil(options.min_repeat_s / warmup_s), 1.0, 1e6));
  std::vector<double> per_call;
  per_call.reserve(static_cast<std::size_t>(std::max(options.repeats, 1)));
  for (int r = 0; r < std::max(options.repeats, 1); ++r) {
    const double t0 = now_s();
    for (std::int64_t i = 0; i < calls; ++i) fn();
    per_call.push_back((now_s() - t0) / static_cast<double>(calls));
  }
  return median(std::move(per_call));
}

}  // namespace strata::calibrate
