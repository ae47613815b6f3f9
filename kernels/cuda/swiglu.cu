// SwiGLU forward/backward (see swiglu.h): grid-stride elementwise kernels, one thread per
// (row, j) owning out[row, j] and both of its inputs.
#include "kernels/cuda/swiglu.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 8192;

// 1 / (1 + e^-a) with the accurate expf (as the CPU's std::exp): e^-a overflows to inf for
// a < -88 and the quotient is then exactly 0.
__device__ __forceinline__ float sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }

__global__ void swiglu_forward_kernel(bf16* __restrict__ out, const bf16* __restrict__ inp,
                                      std::int64_t BT, std::int64_t F) {
  const std::int64_t n = BT * F;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const std::int64_t row = i / F, j = i % F;
    const float a = device::to_f32(inp[row * 2 * F + j]);
    const float b = device::to_f32(inp[row * 2 * F + F + j]);
    out[i] = device::to_bf16(a * sigmoid(a) * b);
  }
}

// No __restrict__: dinp may alias inp.
__global__ void swiglu_backward_kernel(bf16* dinp, const bf16* inp, const bf16* dout,
                                       std::int64_t BT, std::int64_t F, bool accumulate) {
  const std::int64_t n = BT * F;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const std::int64_t row = i / F, j = i % F;
    const std::int64_t gate = row * 2 * F + j, up = gate + F;
    const float a = device::to_f32(inp[gate]);
    const float b = device::to_f32(inp[up]);
    const float dy = device::to_f32(dout[i]);
    const float sig = sigmoid(a);
    const float dgate = dy * b * (sig * (1.0f + a * (1.0f - sig)));  // silu'(a)
    const float dup = dy * (a * sig);
    dinp[gate] = device::to_bf16(accumulate ? device::to_f32(dinp[gate]) + dgate : dgate);
    dinp[up] = device::to_bf16(accumulate ? device::to_f32(dinp[up]) + dup : dup);
  }
}

unsigned blocks_for(std::int64_t N) {
  return static_cast<unsigned>(std::min(device::ceil_div(N, kThreads), kMaxBlocks));
}

}  // namespace

void swiglu_forward(bf16* out, const bf16* inp, std::int64_t BT, std::int64_t F,
                    cudaStream_t stream) {
  constexpr const char* kName = "swiglu_forward";
  detail::require_tensor(kName, "out", out);
  detail::require_tensor(kName, "inp", inp);
  detail::require_positive(kName, "BT", BT);
  detail::require_positive(kName, "F", F);
  swiglu_forward_kernel<<<blocks_for(BT * F), kThreads, 0, stream>>>(out, inp, BT, F);
  CUDA_CHECK_LAUNCH();
}

void swiglu_backward(bf16* dinp, const bf16* inp, const bf16* dout, std::int64_t BT,
                     std::int64_t F, cudaStream_t stream, bool accumulate) {
  constexpr const char* kName = "swiglu_backward";
  detail::require_tensor(kName, "dinp", dinp);
  detail::require_tensor(kName, "inp", inp);
  detail::require_tensor(kName, "dout", dout);
  detail::require_positive(kName, "BT", BT);
  detail::require_positive(kName, "F", F);
  swiglu_backward_kernel<<<blocks_for(BT * F), kThreads, 0, stream>>>(dinp, inp, dout, BT, F,
                                                                       accumulate);
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::kernels::cuda
