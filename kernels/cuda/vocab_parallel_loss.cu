// Vocab-parallel cross-entropy pieces and the broadcast bias add (see vocab_parallel_loss.h).
// The row kernels run one 256-thread block per row: each thread walks its strided columns
// (16-byte vectors of 8 bf16 when the rows are 16-byte aligned, then single columns), the
// warps reduce by butterfly and thread 0 adds the 8 warp partials in warp order, so every
// statistic is the same bits on every run. Statistics accumulate in fp32 from bf16 loads.
// Deliberately no communication (the caller all-reduces between the launches), no fused
// forward+backward (the reductions over the TP group sit between the pieces), and no checks
// of device-resident values: a target outside the shard (negative ones included) adds 0 and
// no onehot, a global_sum of 0 gives an infinite loss, where the CPU twins throw on a
// negative target and on a sum <= 0. Unlike the CPU twins, BT == 0 (nothing launched) and
// Vlocal == 0 (an empty shard: max -3e38, sum 0, target logit 0, no gradient) are accepted.
#include "kernels/cuda/vocab_parallel_loss.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / device::kWarpSize;
constexpr int kV = device::kBf16PerVector;
constexpr std::int64_t kMaxBlocks = 8192;  // grid-stride kernels: bounded grid for huge sizes
// An empty shard's row max: finite, so an all-reduce MAX with it is the other shards' max
// and exp(x - max) never meets -inf - -inf.
constexpr float kEmptyShardMax = -3e38f;

// ---------------------------------------------------------------------------------------
// Kernels

// Calls f(j, x[j]) for this thread's columns j in [0, n): when `aligned` (the row starts on
// 16 bytes), vector v = columns [8v, 8v + 8) for v < n / 8 strided by the block, then the
// remaining columns one by one; never a column >= n (the padding is not read).
template <class F>
__device__ __forceinline__ void for_each_column(const bf16* x, int n, bool aligned, F&& f) {
  int tail = 0;
  if (aligned) {
    const int vectors = n / kV;
    for (int v = threadIdx.x; v < vectors; v += kThreads) {
      float e[kV];
      device::load8(x + v * kV, e);
#pragma unroll
      for (int k = 0; k < kV; ++k) f(v * kV + k, e[k]);
    }
    tail = vectors * kV;
  }
  for (int j = tail + static_cast<int>(threadIdx.x); j < n; j += kThreads) {
    f(j, device::to_f32(x[j]));
  }
}

// The block's max (kMax) or sum of v, valid in thread 0: warp butterflies, then the warps'
// partials in warp order (a fixed tree, so the same bits every run). Called once per kernel.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v) {
  __shared__ float part[kWarps];
  v = kMax ? device::warp_max(v) : device::warp_sum(v);
  if (threadIdx.x % device::kWarpSize == 0) part[threadIdx.x / device::kWarpSize] = v;
  __syncthreads();
  float r = part[0];
  for (int w = 1; w < kWarps; ++w) r = kMax ? fmaxf(r, part[w]) : r + part[w];
  return r;
}

// fmaxf drops NaN like the CPU twin's `x > m ? x : m`.
__global__ void __launch_bounds__(kThreads)
    row_max_kernel(float* __restrict__ local_max, const bf16* __restrict__ logits, int Vlocal,
                   int ld, bool aligned) {
  const bf16* x = logits + static_cast<std::int64_t>(blockIdx.x) * ld;
  float m = -INFINITY;
  for_each_column(x, Vlocal, aligned, [&](int, float v) { m = fmaxf(m, v); });
  m = block_reduce<true>(m);
  if (threadIdx.x == 0) local_max[blockIdx.x] = Vlocal > 0 ? m : kEmptyShardMax;
}

__global__ void __launch_bounds__(kThreads)
    sum_exp_kernel(float* __restrict__ local_sum, const bf16* __restrict__ logits,
                   const float* __restrict__ global_max, int Vlocal, int ld, bool aligned) {
  const bf16* x = logits + static_cast<std::int64_t>(blockIdx.x) * ld;
  const float m = global_max[blockIdx.x];
  float s = 0.0f;
  for_each_column(x, Vlocal, aligned, [&](int, float v) { s += expf(v - m); });
  s = block_reduce<false>(s);
  if (threadIdx.x == 0) local_sum[blockIdx.x] = s;
}

// One thread per row: a single load, so no block per row.
__global__ void target_logit_kernel(float* __restrict__ target_logit,
                                    const bf16* __restrict__ logits,
                                    const std::int32_t* __restrict__ targets, int BT,
                                    int Vlocal, int ld, int v0) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < BT;
       i += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const std::int64_t j = static_cast<std::int64_t>(targets[i]) - v0;
    target_logit[i] = (j >= 0 && j < Vlocal)
                          ? device::to_f32(logits[i * ld + j])
                          : 0.0f;
  }
}

// In double like the CPU twin (BT values: the cost is nil), rounded to fp32 once.
__global__ void loss_kernel(float* __restrict__ losses, float* __restrict__ row_lse,
                            const float* __restrict__ global_max,
                            const float* __restrict__ global_sum,
                            const float* __restrict__ target_logit, int BT) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < BT;
       i += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const double lse = static_cast<double>(global_max[i]) + log(static_cast<double>(global_sum[i]));
    row_lse[i] = static_cast<float>(lse);
    losses[i] = static_cast<float>(lse - target_logit[i]);
  }
}

// In place: each column is read, then written, by the same thread; columns >= Vlocal are
// neither read nor written.
__global__ void __launch_bounds__(kThreads)
    backward_kernel(bf16* __restrict__ logits, const float* __restrict__ dlosses,
                    const float* __restrict__ row_lse, const std::int32_t* __restrict__ targets,
                    int Vlocal, int ld, int v0, bool aligned) {
  const int row = blockIdx.x;
  bf16* x = logits + static_cast<std::int64_t>(row) * ld;
  const float lse = row_lse[row];
  const float dloss = dlosses[row];
  const std::int64_t jt = static_cast<std::int64_t>(targets[row]) - v0;  // may be off-shard
  const auto grad = [&](int j, float v) {
    return (expf(v - lse) - (j == jt ? 1.0f : 0.0f)) * dloss;
  };
  int tail = 0;
  if (aligned) {
    const int vectors = Vlocal / kV;
    for (int v = threadIdx.x; v < vectors; v += kThreads) {
      float e[kV];
      device::load8(x + v * kV, e);
#pragma unroll
      for (int k = 0; k < kV; ++k) e[k] = grad(v * kV + k, e[k]);
      device::store8(x + v * kV, e);
    }
    tail = vectors * kV;
  }
  for (int j = tail + static_cast<int>(threadIdx.x); j < Vlocal; j += kThreads) {
    x[j] = device::to_bf16(grad(j, device::to_f32(x[j])));
  }
}

// out[r, c] = bf16(out[r, c] + bias[c]): one fp32 add, one rounding. Vectorised (8 columns
// per access) when cols % 8 == 0 and both pointers are 16-byte aligned.
__global__ void add_bias_kernel(bf16* __restrict__ out, const bf16* __restrict__ bias,
                                std::int64_t N, int cols) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < N;
       i += stride) {
    const int c = static_cast<int>(i % cols);
    out[i] = device::to_bf16(device::to_f32(out[i]) + device::to_f32(bias[c]));
  }
}

__global__ void add_bias_vec_kernel(bf16* __restrict__ out, const bf16* __restrict__ bias,
                                    std::int64_t vectors, int cols) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  for (std::int64_t v = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
       v < vectors; v += stride) {
    const int c = static_cast<int>((v * kV) % cols);  // cols % 8 == 0: a vector is in one row
    float o[kV], b[kV];
    device::load8(out + v * kV, o);
    device::load8(bias + c, b);
#pragma unroll
    for (int k = 0; k < kV; ++k) o[k] += b[k];
    device::store8(out + v * kV, o);
  }
}

// ---------------------------------------------------------------------------------------
// Launchers

bool on16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// The shard's shape: BT rows (0: nothing to do), Vlocal >= 0 columns in rows of stride
// ld >= Vlocal. Returns whether every row starts on 16 bytes (the vector path).
bool check_shard(const char* kName, const bf16* logits, int BT, int Vlocal, int ld) {
  detail::require_tensor(kName, "logits", logits);
  detail::require_non_negative(kName, "BT", BT);
  detail::require_non_negative(kName, "Vlocal", Vlocal);
  if (ld < Vlocal) {
    throw KernelError(
        fmt::format("{}: ld = {}; expected >= Vlocal = {} (the row stride)", kName, ld, Vlocal));
  }
  return ld % kV == 0 && on16(logits);
}

unsigned row_blocks(int BT) {
  return static_cast<unsigned>(std::min<std::int64_t>(device::ceil_div(BT, kThreads), kMaxBlocks));
}

}  // namespace

void vocab_parallel_row_max(float* local_max, const bf16* logits, int BT, int Vlocal, int ld,
                            cudaStream_t stream) {
  constexpr const char* kName = "vocab_parallel_row_max";
  detail::require_tensor(kName, "local_max", local_max);
  const bool aligned = check_shard(kName, logits, BT, Vlocal, ld);
  if (BT == 0) return;
  row_max_kernel<<<BT, kThreads, 0, stream>>>(local_max, logits, Vlocal, ld, aligned);
  CUDA_CHECK_LAUNCH();
}

void vocab_parallel_sum_exp(float* local_sum, const bf16* logits, const float* global_max,
                            int BT, int Vlocal, int ld, cudaStream_t stream) {
  constexpr const char* kName = "vocab_parallel_sum_exp";
  detail::require_tensor(kName, "local_sum", local_sum);
  detail::require_tensor(kName, "global_max", global_max);
  const bool aligned = check_shard(kName, logits, BT, Vlocal, ld);
  if (BT == 0) return;
  sum_exp_kernel<<<BT, kThreads, 0, stream>>>(local_sum, logits, global_max, Vlocal, ld,
                                              aligned);
  CUDA_CHECK_LAUNCH();
}

void vocab_parallel_target_logit(float* target_logit, const bf16* logits,
                                 const std::int32_t* targets, int BT, int Vlocal, int ld, int v0,
                                 cudaStream_t stream) {
  constexpr const char* kName = "vocab_parallel_target_logit";
  detail::require_tensor(kName, "target_logit", target_logit);
  detail::require_tensor(kName, "targets", targets);
  check_shard(kName, logits, BT, Vlocal, ld);
  detail::require_non_negative(kName, "v0", v0);
  if (BT == 0) return;
  target_logit_kernel<<<row_blocks(BT), kThreads, 0, stream>>>(target_logit, logits, targets,
                                                               BT, Vlocal, ld, v0);
  CUDA_CHECK_LAUNCH();
}

void vocab_parallel_loss(float* losses, float* row_lse, const float* global_max,
                         const float* global_sum, const float* target_logit, int BT,
                         cudaStream_t stream) {
  constexpr const char* kName = "vocab_parallel_loss";
  detail::require_tensor(kName, "losses", losses);
  detail::require_tensor(kName, "row_lse", row_lse);
  detail::require_tensor(kName, "global_max", global_max);
  detail::require_tensor(kName, "global_sum", global_sum);
  detail::require_tensor(kName, "target_logit", target_logit);
  detail::require_non_negative(kName, "BT", BT);
  if (BT == 0) return;
  loss_kernel<<<row_blocks(BT), kThreads, 0, stream>>>(losses, row_lse, global_max, global_sum,
                                                       target_logit, BT);
  CUDA_CHECK_LAUNCH();
}

void vocab_parallel_cross_entropy_backward(bf16* logits, const float* dlosses,
                                           const float* row_lse, const std::int32_t* targets,
                                           int BT, int Vlocal, int ld, int v0,
                                           cudaStream_t stream) {
  constexpr const char* kName = "vocab_parallel_cross_entropy_backward";
  detail::require_tensor(kName, "dlosses", dlosses);
  detail::require_tensor(kName, "row_lse", row_lse);
  detail::require_tensor(kName, "targets", targets);
  const bool aligned = check_shard(kName, logits, BT, Vlocal, ld);
  detail::require_non_negative(kName, "v0", v0);
  if (BT == 0 || Vlocal == 0) return;  // no column to write
  backward_kernel<<<BT, kThreads, 0, stream>>>(logits, dlosses, row_lse, targets, Vlocal, ld,
                                               v0, aligned);
  CUDA_CHECK_LAUNCH();
}

void add_bias(bf16* out, const bf16* bias, int rows, int cols, cudaStream_t stream) {
  constexpr const char* kName = "add_bias";
  detail::require_tensor(kName, "out", out);
  detail::require_tensor(kName, "bias", bias);
  detail::require_non_negative(kName, "rows", rows);
  detail::require_non_negative(kName, "cols", cols);
  const std::int64_t N = static_cast<std::int64_t>(rows) * cols;
  if (N == 0) return;
  if (cols % kV == 0 && on16(out) && on16(bias)) {
    const std::int64_t vectors = N / kV;
    const auto blocks =
        static_cast<unsigned>(std::min(device::ceil_div(vectors, kThreads), kMaxBlocks));
    add_bias_vec_kernel<<<blocks, kThreads, 0, stream>>>(out, bias, vectors, cols);
  } else {
    const auto blocks = static_cast<unsigned>(std::min(device::ceil_div(N, kThreads), kMaxBlocks));
    add_bias_kernel<<<blocks, kThreads, 0, stream>>>(out, bias, N, cols);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::kernels::cuda
