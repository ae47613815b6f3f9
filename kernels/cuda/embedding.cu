// Token + position embedding forward/backward (see embedding.h for the determinism scheme).
#include "kernels/cuda/embedding.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxRowOwners = 512;  // dwte blocks; row r belongs to block r % owners
constexpr int kTokenChunk = 1024;   // tokens staged in shared memory at a time

// ---------------------------------------------------------------------------------------
// Kernels

// One block per (b, t) row.
__global__ void __launch_bounds__(kThreads)
    embedding_forward_kernel(bf16* __restrict__ out, const std::int32_t* __restrict__ tokens,
                             const bf16* __restrict__ wte, const bf16* __restrict__ wpe, int T,
                             int C, int vocab_start, int vocab_end) {
  const std::int64_t i = blockIdx.x;
  const int tok = tokens[i];
  const bool in_slice = tok >= vocab_start && tok < vocab_end;
  const bf16* e = wte + static_cast<std::int64_t>(tok - vocab_start) * C;
  const bf16* p = wpe != nullptr ? wpe + (i % T) * C : nullptr;
  for (int c = threadIdx.x; c < C; c += kThreads) {
    float x = in_slice ? device::to_f32(e[c]) : 0.0f;
    if (p != nullptr) x += device::to_f32(p[c]);
    out[i * C + c] = device::to_bf16(x);
  }
}

__global__ void __launch_bounds__(kThreads)
    embedding_backward_wte_kernel(float* __restrict__ dwte, const bf16* __restrict__ dout,
                                  const std::int32_t* __restrict__ tokens, std::int64_t BT,
                                  int C, int vocab_start, int vocab_end) {
  __shared__ std::int32_t chunk[kTokenChunk];
  for (std::int64_t first = 0; first < BT; first += kTokenChunk) {
    const int len = static_cast<int>(BT - first < kTokenChunk ? BT - first : kTokenChunk);
    __syncthreads();  // previous chunk consumed
    for (int j = threadIdx.x; j < len; j += kThreads) chunk[j] = tokens[first + j];
    __syncthreads();
    for (int j = 0; j < len; ++j) {  // position order: the determinism guarantee
      const int tok = chunk[j];
      if (tok < vocab_start || tok >= vocab_end) continue;
      const int r = tok - vocab_start;
      if (r % gridDim.x != blockIdx.x) continue;  // another block owns this row
      const bf16* g = dout + (first + j) * C;
      float* d = dwte + static_cast<std::int64_t>(r) * C;
      for (int c = threadIdx.x; c < C; c += kThreads) d[c] += device::to_f32(g[c]);
    }
  }
}

// One thread per (t, c) element of dwpe.
__global__ void __launch_bounds__(kThreads)
    embedding_backward_wpe_kernel(float* __restrict__ dwpe, const bf16* __restrict__ dout,
                                  int B, int T, int C) {
  const std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (e >= static_cast<std::int64_t>(T) * C) return;
  float acc = dwpe[e];
  for (int b = 0; b < B; ++b) acc += device::to_f32(dout[static_cast<std::int64_t>(b) * T * C + e]);
  dwpe[e] = acc;
}

// ---------------------------------------------------------------------------------------
// Launchers

void check_common(const char* kName, const std::int32_t* tokens, int B, int T, int C,
                  int vocab_start, int vocab_end) {
  detail::require_tensor(kName, "tokens", tokens);
  detail::require_positive(kName, "B", B);
  detail::require_positive(kName, "T", T);
  detail::require_positive(kName, "C", C);
  detail::require_non_negative(kName, "vocab_start", vocab_start);
  if (vocab_end <= vocab_start) {
    throw KernelError(fmt::format("{}: vocab slice [{}, {}) is empty; expected vocab_end > "
                                  "vocab_start", kName, vocab_start, vocab_end));
  }
}

}  // namespace

void embedding_forward(bf16* out, const std::int32_t* tokens, const bf16* wte,
                       const bf16* wpe, int B, int T, int C, int vocab_start, int vocab_end,
                       cudaStream_t stream) {
  constexpr const char* kName = "embedding_forward";
  detail::require_tensor(kName, "out", out);
  detail::require_tensor(kName, "wte", wte);
  check_common(kName, tokens, B, T, C, vocab_start, vocab_end);
  const std::int64_t BT = static_cast<std::int64_t>(B) * T;
  if (BT > 0x7fffffff) {
    throw KernelError(fmt::format("{}: B * T = {}; expected < 2^31 (one block per row)", kName, BT));
  }
  embedding_forward_kernel<<<static_cast<unsigned>(BT), kThreads, 0, stream>>>(
      out, tokens, wte, wpe, T, C, vocab_start, vocab_end);
  CUDA_CHECK_LAUNCH();
}

void embedding_backward(float* dwte, float* dwpe, const bf16* dout,
                        const std::int32_t* tokens, int B, int T, int C, int vocab_start,
                        int vocab_end, cudaStream_t stream) {
  constexpr const char* kName = "embedding_backward";
  detail::require_tensor(kName, "dout", dout);
  check_common(kName, tokens, B, T, C, vocab_start, vocab_end);
  const std::int64_t BT = static_cast<std::int64_t>(B) * T;
  if (dwte != nullptr) {
    const int owners = std::min(vocab_end - vocab_start, kMaxRowOwners);
    embedding_backward_wte_kernel<<<owners, kThreads, 0, stream>>>(dwte, dout, tokens, BT, C,
                                                                   vocab_start, vocab_end);
    CUDA_CHECK_LAUNCH();
  }
  if (dwpe != nullptr) {
    const auto blocks =
        static_cast<unsigned>(device::ceil_div(static_cast<std::int64_t>(T) * C, kThreads));
    embedding_backward_wpe_kernel<<<blocks, kThreads, 0, stream>>>(dwpe, dout, B, T, C);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace strata::kernels::cuda
