// Llama's operators timed through the CUDA backend's LayerOps (llama_op_bench.h's one code
// path): CudaLayerOps on an accounted DevicePool, attention chosen as a run's default
// (--attention auto: cuDNN's fused attention where it takes the shape and agrees with
// strata's kernels), timed with CUDA events on `stream`. Everything it allocates (the pool's
// blocks, the ops' cuBLASLt handle and cuDNN) is freed on return, before the calibration
// measures the headroom.
// Deliberately not here: the other CUDA benchmarks (cuda_compute_bench.h).
#pragma once

#include <cuda_runtime.h>

#include "executor/calibrate/llama_op_bench.h"
#include "executor/calibrate/timing.h"

namespace strata::calibrate {

// CudaError / SystemError when a CUDA call fails; KernelError when a kernel refuses a shape
// (head size not 64 or 128: check_cuda_shapes first).
LlamaOpSeconds measure_cuda_llama_ops(const LlamaOpShape& shape, cudaStream_t stream,
                                      const TimingOptions& timing);

}  // namespace strata::calibrate
