// Llama's operators on the CUDA backend; see cuda_llama_ops.h.
#include "executor/calibrate/cuda_llama_ops.h"

#include <vector>

#include "executor/calibrate/compute_bench.h"
#include "executor/calibrate/cuda_timing.h"
#include "executor/cuda/cuda_layer_ops.h"
#include "executor/cuda/device_pool.h"
#include "executor/memory/accounting_allocator.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/swiglu.h"

namespace strata::calibrate {
namespace kc = strata::kernels::cuda;

LlamaOpSeconds measure_cuda_llama_ops(const LlamaOpShape& shape, cudaStream_t stream,
                                      const TimingOptions& timing) {
  AccountingAllocator accounting;  // unlimited: the driver is what refuses
  cuda::DevicePool pool(accounting, stream);
  cuda::CudaLayerOps ops(pool, stream);
  LlamaOpBackend backend;
  backend.ops = &ops;
  backend.seconds = [stream, &timing](const std::function<void()>& call) {
    return median_event_seconds(call, stream, timing);
  };
  backend.fill = [](const engine::Tensor& t, std::uint32_t seed) {
    const std::vector<float> values = bench_values(t.size(), seed);
    if (t.dtype() == DType::kF32) {
      CUDA_CHECK(cudaMemcpy(t.data(), values.data(), t.bytes(), cudaMemcpyHostToDevice));
      return;
    }
    const std::vector<kc::bf16> host(values.begin(), values.end());
    CUDA_CHECK(cudaMemcpy(t.data(), host.data(), t.bytes(), cudaMemcpyHostToDevice));
  };
  // CudaLayerOps::matmul_swiglu_backward's last step.
  backend.swiglu_backward = [stream](void* dinp, const void* pre, const void* dout, int BT,
                                     int F) {
    kc::swiglu_backward(static_cast<kc::bf16*>(dinp), static_cast<const kc::bf16*>(pre),
                        static_cast<const kc::bf16*>(dout), BT, F, stream, /*accumulate=*/false);
  };
  LlamaOpSeconds seconds = measure_llama_ops(backend, shape);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return seconds;
}

}  // namespace strata::calibrate
