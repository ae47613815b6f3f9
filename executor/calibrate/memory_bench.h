// The host's memory out of cache: its streaming bandwidth and the CPU AdamW rate, measured
// on one set of arrays that spans kOutOfCacheFactor times the last-level cache
// (last_level_cache.h), repeats of the two alternated so that a busy neighbour hits both
// alike. AdamW moves 28 bytes a parameter (reads parameter, gradient and both moments,
// writes parameter and moments), so its rate times 28 is a bandwidth the memory must give:
// a rate timed on arrays the cache holds claims more than that (issue 38: 7.2e9 params/s,
// ~200 GB/s, on a VM whose DRAM gives ~20), which a profile then rejects on load.
//
// Bandwidth kernels (all cores, OpenMP): STREAM's copy (a = b, counted 8 bytes an element)
// and triad (a = b + s c, 12), as STREAM counts them, though the CPU also reads each line of
// a before writing it; the in-place update a = a + s b (12, no such read); AdamW's own
// streams with no arithmetic (p, m, v each += g: 28; four streams read and three written,
// which a core's prefetchers serve faster than STREAM's two or three). Each kernel's rate is
// its fastest repeat, as STREAM reports (what the memory can do; a neighbour only slows a
// repeat down), and the bandwidth the best of the four, so the fraction of it AdamW reaches
// (the median of its repeats: what a step takes) is not flattered. On the busy 2-core VM
// the medians of the two, alternated, still differed by up to 1.25x at 256 MiB.
// Deliberately not here: the other compute benchmarks (compute_bench.h), the thread count
// (the caller's scope).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "executor/calibrate/timing.h"
#include "kernels/dtype.h"

namespace strata::calibrate {

// Four float arrays (AdamW's parameters, gradients and moments) of working_set_bytes / 16
// elements each, first touched in parallel on the threads that use them.
class HostArrays {
 public:
  explicit HostArrays(std::int64_t working_set_bytes);
  std::int64_t size() const { return n_; }
  std::int64_t working_set_bytes() const { return 16 * n_; }
  float* p() { return p_.get(); }
  float* g() { return g_.get(); }
  float* m() { return m_.get(); }
  float* v() { return v_.get(); }

 private:
  std::int64_t n_;
  std::unique_ptr<float[]> p_, g_, m_, v_;
};

struct MemoryBandwidth {
  double copy_bytes_per_s = 0;
  double triad_bytes_per_s = 0;
  double in_place_bytes_per_s = 0;
  double adamw_streams_bytes_per_s = 0;
  double best() const;
};

struct HostMemoryRates {
  MemoryBandwidth bandwidth;  // each kernel's fastest repeat
  double adam_params_per_s = 0;
  double adam_bf16_params_per_s = 0;  // with the bf16 copy written too (0: not asked)
};

// One untimed call of each (threads started, pages touched; it sets how many calls a repeat
// makes to last timing.min_repeat_s), then timing.repeats rounds of: the four bandwidth
// kernels, AdamW, and (with_bf16_copy) AdamW writing a bf16 copy as well: the bandwidths
// the fastest round's, the AdamW rates the median round's. AdamW's bytes a parameter:
// cost_model/specs/profile.h's kCpuAdamBytesPerParam. Runs at the caller's OpenMP thread count.
HostMemoryRates measure_host_memory(HostArrays& arrays, const TimingOptions& timing,
                                    bool with_bf16_copy = false);

// AdamW alone on the arrays (median_call_seconds), parameters per second.
double measure_adamw_params_per_s(HostArrays& arrays, const TimingOptions& timing);

// kernels::cpu::copy of one array into another, bytes copied per second.
double measure_copy_bytes_per_s(HostArrays& arrays, const TimingOptions& timing);

}  // namespace strata::calibrate
