// GeLU forward/backward (see gelu.h): grid-stride elementwise kernels.
#include "kernels/cuda/gelu.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 8192;

// No __restrict__: out may alias inp, dinp may alias dout.
__global__ void gelu_forward_kernel(bf16* out, const bf16* inp, std::int64_t N) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < N;
       i += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    out[i] = device::to_bf16(device::gelu(device::to_f32(inp[i])));
  }
}

__global__ void gelu_backward_kernel(bf16* dinp, const bf16* inp, const bf16* dout,
                                     std::int64_t N, bool accumulate) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < N;
       i += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const float g = device::gelu_grad(device::to_f32(inp[i])) * device::to_f32(dout[i]);
    dinp[i] = device::to_bf16(accumulate ? device::to_f32(dinp[i]) + g : g);
  }
}

unsigned blocks_for(std::int64_t N) {
  return static_cast<unsigned>(std::min(device::ceil_div(N, kThreads), kMaxBlocks));
}

}  // namespace

void gelu_forward(bf16* out, const bf16* inp, std::int64_t N, cudaStream_t stream) {
  detail::require_tensor("gelu_forward", "out", out);
  detail::require_tensor("gelu_forward", "inp", inp);
  detail::require_non_negative("gelu_forward", "N", N);
  if (N == 0) return;
  gelu_forward_kernel<<<blocks_for(N), kThreads, 0, stream>>>(out, inp, N);
  CUDA_CHECK_LAUNCH();
}

void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, std::int64_t N,
                   cudaStream_t stream, bool accumulate) {
  detail::require_tensor("gelu_backward", "dinp", dinp);
  detail::require_tensor("gelu_backward", "inp", inp);
  detail::require_tensor("gelu_backward", "dout", dout);
  detail::require_non_negative("gelu_backward", "N", N);
  if (N == 0) return;
  gelu_backward_kernel<<<blocks_for(N), kThreads, 0, stream>>>(dinp, inp, dout, N, accumulate);
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::kernels::cuda
