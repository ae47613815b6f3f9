// The CUDA twin of timing.h: the same policy (one warm-up call, then `repeats` repeats, each
// of enough calls to last min_repeat_s; the median per call), timed with CUDA events on the
// stream the calls launch on, so the figure is the device's time and not the host's launch
// rate. Back-to-back launches within a repeat include the gaps between kernels, as a
// training step's do.
// Deliberately not here: what is timed (cuda_compute_bench.h).
#pragma once

#include <functional>

#include <cuda_runtime.h>

#include "executor/calibrate/timing.h"

namespace strata::calibrate {

// Seconds per call of `launch`, which enqueues work on `stream` (and does not synchronise).
// CUDA errors (and asynchronous faults of the launched work) throw kernels::cuda::CudaError.
double median_event_seconds(const std::function<void()>& launch, cudaStream_t stream,
                            const TimingOptions& options);

}  // namespace strata::calibrate
