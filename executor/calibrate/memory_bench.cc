// Host memory bandwidth and CPU AdamW out of cache (see memory_bench.h).
#include "executor/calibrate/memory_bench.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "cost_model/specs/profile.h"

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/elementwise.h"

namespace strata::calibrate {
namespace {

namespace kc = kernels::cpu;

// Allocated untouched, then written by the threads that will stream it.
std::unique_ptr<float[]> first_touched(std::int64_t n, float value) {
  auto a = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(n));
  float* x = a.get();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) x[i] = value;
  return a;
}

double seconds_of(const auto& work) {
  const double start = now_s();
  work();
  return now_s() - start;
}

kc::AdamWParams hyper() {
  kc::AdamWParams hp;
  hp.lr = 1e-4f;
  hp.weight_decay = 0.01f;
  return hp;
}

}  // namespace

HostArrays::HostArrays(std::int64_t working_set_bytes)
    : n_(std::max<std::int64_t>(working_set_bytes / 16, 1)),
      p_(first_touched(n_, 0.5f)),
      g_(first_touched(n_, 0.01f)),
      m_(first_touched(n_, 0.0f)),
      v_(first_touched(n_, 0.0f)) {}

double MemoryBandwidth::best() const {
  return std::max({copy_bytes_per_s, triad_bytes_per_s, in_place_bytes_per_s,
                   adamw_streams_bytes_per_s});
}

HostMemoryRates measure_host_memory(HostArrays& arrays, const TimingOptions& timing,
                                    bool with_bf16_copy) {
  const std::int64_t n = arrays.size();
  float *p = arrays.p(), *g = arrays.g(), *m = arrays.m(), *v = arrays.v();
  // The bandwidth kernels write p, m and v, which stay finite, and v >= 0 (AdamW takes its
  // square root).
  const auto copy = [&] {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) m[i] = g[i];
  };
  const auto triad = [&] {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) m[i] = g[i] + 0.5f * v[i];
  };
  const auto in_place = [&] {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) m[i] = m[i] + 0.5f * g[i];
  };
  const auto streams = [&] {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      p[i] += g[i];
      m[i] += g[i];
      v[i] += g[i];
    }
  };
  std::vector<Bf16Bits> bf16(with_bf16_copy ? static_cast<std::size_t>(n) : 0);
  int step = 0;
  const auto adamw = [&] { kc::adamw_update_range(p, g, m, v, 0, n, hyper(), ++step); };
  const auto adamw_bf16 = [&] {
    kc::adamw_update_range(p, g, m, v, 0, n, hyper(), ++step, kc::Isa::kBest, bf16.data());
  };
  // Each kernel, its calls per repeat (enough to last timing.min_repeat_s, from an untimed
  // first call that also touches every page and starts the threads), and its per-call times.
  struct Timed {
    std::function<void()> fn;
    int calls = 1;
    std::vector<double> per_call_s;
  };
  std::vector<Timed> timed = {Timed{copy, 1, {}}, Timed{triad, 1, {}}, Timed{in_place, 1, {}},
                              Timed{streams, 1, {}}, Timed{adamw, 1, {}}};
  if (with_bf16_copy) timed.push_back(Timed{adamw_bf16, 1, {}});
  for (Timed& t : timed) {
    const double first_s = seconds_of(t.fn);
    t.calls = static_cast<int>(std::clamp(std::ceil(timing.min_repeat_s / first_s), 1.0, 1e6));
  }
  for (int r = 0; r < std::max(timing.repeats, 1); ++r) {
    for (Timed& t : timed) {
      t.per_call_s.push_back(seconds_of([&] {
                               for (int c = 0; c < t.calls; ++c) t.fn();
                             }) /
                             t.calls);
    }
  }
  const double nd = static_cast<double>(n);
  const auto fastest = [](const std::vector<double>& s) {
    return *std::min_element(s.begin(), s.end());
  };
  HostMemoryRates r;
  r.bandwidth.copy_bytes_per_s = 8 * nd / fastest(timed[0].per_call_s);
  r.bandwidth.triad_bytes_per_s = 12 * nd / fastest(timed[1].per_call_s);
  r.bandwidth.in_place_bytes_per_s = 12 * nd / fastest(timed[2].per_call_s);
  r.bandwidth.adamw_streams_bytes_per_s =
      kCpuAdamBytesPerParam * nd / fastest(timed[3].per_call_s);
  r.adam_params_per_s = nd / median(timed[4].per_call_s);
  if (with_bf16_copy) r.adam_bf16_params_per_s = nd / median(timed[5].per_call_s);
  return r;
}

double measure_adamw_params_per_s(HostArrays& arrays, const TimingOptions& timing) {
  int step = 0;
  // Step grows with each call as in training (bias correction differs per step, the work not).
  const double s = median_call_seconds(
      [&] {
        kc::adamw_update_range(arrays.p(), arrays.g(), arrays.m(), arrays.v(), 0, arrays.size(),
                               hyper(), ++step);
      },
      timing);
  return static_cast<double>(arrays.size()) / s;
}

double measure_copy_bytes_per_s(HostArrays& arrays, const TimingOptions& timing) {
  const double s = median_call_seconds([&] { kc::copy(arrays.m(), arrays.p(), arrays.size()); },
                                       timing);
  return static_cast<double>(arrays.size()) * sizeof(float) / s;
}

}  // namespace strata::calibrate
