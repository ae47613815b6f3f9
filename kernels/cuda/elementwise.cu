// Elementwise kernels (see elementwise.h): one grid-stride kernel template, instantiated for
// four small functors. A bounded grid (<= 8192 blocks) keeps launches cheap for huge N.
#include "kernels/cuda/elementwise.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 8192;

template <class Op>
__global__ void elementwise_kernel(Op op, std::int64_t N) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < N;
       i += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    op(i);
  }
}

// No __restrict__ on the pointers: out may alias a or b.
struct ResidualOp {
  bf16* out;
  const bf16* a;
  const bf16* b;
  __device__ void operator()(std::int64_t i) const {
    out[i] = device::to_bf16(device::to_f32(a[i]) + device::to_f32(b[i]));
  }
};
struct AccumulateOp {
  float* dst;
  const bf16* src;
  __device__ void operator()(std::int64_t i) const { dst[i] += device::to_f32(src[i]); }
};
struct ToBf16Op {
  bf16* dst;
  const float* src;
  __device__ void operator()(std::int64_t i) const { dst[i] = device::to_bf16(src[i]); }
};
struct ToF32Op {
  float* dst;
  const bf16* src;
  __device__ void operator()(std::int64_t i) const { dst[i] = device::to_f32(src[i]); }
};

template <class Op>
void launch(const Op& op, std::int64_t N, cudaStream_t stream) {
  if (N == 0) return;
  const auto blocks = static_cast<unsigned>(std::min(device::ceil_div(N, kThreads), kMaxBlocks));
  elementwise_kernel<<<blocks, kThreads, 0, stream>>>(op, N);
  CUDA_CHECK_LAUNCH();
}

void check(const char* kName, const void* dst, const char* dst_name, const void* src,
           const char* src_name, std::int64_t N) {
  detail::require_tensor(kName, dst_name, dst);
  detail::require_tensor(kName, src_name, src);
  detail::require_non_negative(kName, "N", N);
}

}  // namespace

void residual_forward(bf16* out, const bf16* a, const bf16* b, std::int64_t N,
                      cudaStream_t stream) {
  check("residual_forward", out, "out", a, "a", N);
  detail::require_tensor("residual_forward", "b", b);
  launch(ResidualOp{out, a, b}, N, stream);
}

void accumulate(float* dst, const bf16* src, std::int64_t N, cudaStream_t stream) {
  check("accumulate", dst, "dst", src, "src", N);
  launch(AccumulateOp{dst, src}, N, stream);
}

void cast_to_bf16(bf16* dst, const float* src, std::int64_t N, cudaStream_t stream) {
  check("cast_to_bf16", dst, "dst", src, "src", N);
  launch(ToBf16Op{dst, src}, N, stream);
}

void cast_to_f32(float* dst, const bf16* src, std::int64_t N, cudaStream_t stream) {
  check("cast_to_f32", dst, "dst", src, "src", N);
  launch(ToF32Op{dst, src}, N, stream);
}

}  // namespace strata::kernels::cuda
