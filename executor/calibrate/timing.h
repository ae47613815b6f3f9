// Wall-clock timing for the microbenchmarks of `strata calibrate`: the median of repeated
// timings, each repeat long enough (several calls when one call is short) that the clock's
// resolution and a single scheduler hiccup do not decide the figure. Medians, not means,
// because this 2-core machine is shared and a repeat that lost its core is an outlier.
//
// Deliberately not here: what is timed (compute_bench.h, collective_bench.h), statistics
// beyond the median.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace strata::calibrate {

struct TimingOptions {
  int repeats = 5;             // timed repeats (after one untimed warm-up call)
  double min_repeat_s = 0.02;  // each repeat runs the call enough times to last this long
};

// The median of `values` (the mean of the two middle ones for an even count). Throws
// std::invalid_argument when empty.
double median(std::vector<double> values);

// Seconds per call of fn: one warm-up call (its duration sets how many calls a repeat
// makes), then options.repeats repeats; the median of their per-call times.
double median_call_seconds(const std::function<void()>& fn, const TimingOptions& options);

// Seconds since an arbitrary fixed origin (steady clock).
double now_s();

}  // namespace strata::calibrate
