// RoPE forward/backward (see rope.h): one thread per (row, pair i) computes its cosine and
// sine once (double precision: the positions reach 10^5) and rotates pair i of every head of
// the row. Consecutive threads take consecutive i, so a warp's reads of one head's two halves
// are contiguous.
#include "kernels/cuda/rope.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 8192;

__global__ void rope_kernel(bf16* __restrict__ x, std::int64_t rows, int T, int heads, int HS,
                            std::int64_t row_stride, int pos_offset, RopeFrequencies freq,
                            float sign) {
  const int half = HS / 2;
  const std::int64_t n = rows * half;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const std::int64_t r = e / half;
    const int i = static_cast<int>(e % half);
    const double pos = static_cast<double>(pos_offset) + static_cast<double>(r % T);
    const double angle = pos * rope_inverse_frequency(freq, i, HS);
    double s = 0.0, c = 0.0;
    sincos(angle, &s, &c);
    const float cf = static_cast<float>(c);
    const float sf = sign * static_cast<float>(s);
    bf16* lo = x + r * row_stride + i;
    for (int h = 0; h < heads; ++h, lo += HS) {
      const float a = device::to_f32(lo[0]);
      const float b = device::to_f32(lo[half]);
      lo[0] = device::to_bf16(a * cf - b * sf);
      lo[half] = device::to_bf16(b * cf + a * sf);
    }
  }
}

void check(const char* kernel, const bf16* x, int B, int T, int heads, int HS,
           std::int64_t row_stride, int pos_offset, const RopeFrequencies& freq) {
  detail::require_tensor(kernel, "x", x);
  detail::require_positive(kernel, "B", B);
  detail::require_positive(kernel, "T", T);
  detail::require_positive(kernel, "heads", heads);
  detail::require_positive(kernel, "HS", HS);
  detail::require_non_negative(kernel, "pos_offset", pos_offset);
  detail::require_multiple(kernel, "HS", HS, 2);
  if (row_stride < static_cast<std::int64_t>(heads) * HS) {
    throw KernelError(fmt::format("{}: row_stride = {}; expected >= heads * HS = {}", kernel,
                                  row_stride, static_cast<std::int64_t>(heads) * HS));
  }
  if (const std::string why = rope_frequencies_violation(freq); !why.empty()) {
    throw KernelError(fmt::format("{}: {}", kernel, why));
  }
}

void launch(bf16* x, int B, int T, int heads, int HS, std::int64_t row_stride, int pos_offset,
            const RopeFrequencies& freq, float sign, cudaStream_t stream) {
  const std::int64_t rows = static_cast<std::int64_t>(B) * T;
  const auto blocks =
      static_cast<unsigned>(std::min(device::ceil_div(rows * (HS / 2), kThreads), kMaxBlocks));
  rope_kernel<<<blocks, kThreads, 0, stream>>>(x, rows, T, heads, HS, row_stride, pos_offset,
                                               freq, sign);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_forward(bf16* x, int B, int T, int heads, int HS, std::int64_t row_stride,
                  int pos_offset, const RopeFrequencies& freq, cudaStream_t stream) {
  check("rope_forward", x, B, T, heads, HS, row_stride, pos_offset, freq);
  launch(x, B, T, heads, HS, row_stride, pos_offset, freq, 1.0f, stream);
}

void rope_backward(bf16* dx, int B, int T, int heads, int HS, std::int64_t row_stride,
                   int pos_offset, const RopeFrequencies& freq, cudaStream_t stream) {
  check("rope_backward", dx, B, T, heads, HS, row_stride, pos_offset, freq);
  launch(dx, B, T, heads, HS, row_stride, pos_offset, freq, -1.0f, stream);
}

}  // namespace strata::kernels::cuda
