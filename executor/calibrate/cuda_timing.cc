// Median-of-repeats timing with CUDA events; see cuda_timing.h.
#include "executor/calibrate/cuda_timing.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_resources.h"

namespace strata::calibrate {

namespace kc = strata::kernels::cuda;

double median_event_seconds(const std::function<void()>& launch, cudaStream_t stream,
                            const TimingOptions& options) {
  const kc::Event start = kc::Event::create(), stop = kc::Event::create();
  // Warm-up: module loading, cuBLASLt's algorithm choice, first touch of the buffers.
  launch();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  // One timed call sets how many calls a repeat makes.
  start.record(stream);
  launch();
  stop.record(stream);
  stop.synchronize();
  const double one_s = std::max(static_cast<double>(stop.elapsed_ms_since(start)) * 1e-3, 1e-9);
  const auto calls = static_cast<std::int64_t>(
      std::clamp(std::ceil(options.min_repeat_s / one_s), 1.0, 1e6));
  std::vector<double> per_call;
  for (int r = 0; r < std::max(options.repeats, 1); ++r) {
    start.record(stream);
    for (std::int64_t i = 0; i < calls; ++i) launch();
    stop.record(stream);
    stop.synchronize();
    per_call.push_back(static_cast<double>(stop.elapsed_ms_since(start)) * 1e-3 /
                       static_cast<double>(calls));
  }
  return median(std::move(per_call));
}

}  // namespace strata::calibrate
