// Fused softmax cross-entropy (see cross_entropy.h). One block per row; each thread keeps an
// online (max, sum of exp) over its strided elements, and the block combines the 256 pairs
// in a fixed tree order, so the result is the same on every run.
#include "kernels/cuda/cross_entropy.h"

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// ---------------------------------------------------------------------------------------
// Kernels

// (m, s) represents sum exp(x - m) = s. Merging two keeps the larger max; an empty side
// (m = -inf, s = 0) is the identity (guarded: -inf - -inf would be NaN).
struct MaxSum {
  float m;
  float s;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  if (a.m == -INFINITY) return b;
  if (b.m == -INFINITY) return a;
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_forward_kernel(float* __restrict__ losses, float* __restrict__ row_max,
                                 float* __restrict__ row_lse, const T* __restrict__ logits,
                                 const std::int32_t* __restrict__ targets, int V, int ld) {
  __shared__ MaxSum warp_part[kThreads / device::kWarpSize];
  const int row = blockIdx.x;
  const T* x = logits + static_cast<std::int64_t>(row) * ld;
  MaxSum acc{-INFINITY, 0.0f};
  for (int j = threadIdx.x; j < V; j += kThreads) {
    const float v = device::to_f32(x[j]);
    if (v > acc.m) {
      acc.s = acc.s * expf(acc.m - v) + 1.0f;  // expf(-inf) = 0 on the first element
      acc.m = v;
    } else {
      acc.s += expf(v - acc.m);
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const MaxSum other{__shfl_xor_sync(device::kFullMask, acc.m, offset),
                       __shfl_xor_sync(device::kFullMask, acc.s, offset)};
    acc = merge(acc, other);
  }
  if (threadIdx.x % device::kWarpSize == 0) warp_part[threadIdx.x / device::kWarpSize] = acc;
  __syncthreads();
  if (threadIdx.x != 0) return;
  MaxSum total = warp_part[0];
  for (int w = 1; w < kThreads / device::kWarpSize; ++w) total = merge(total, warp_part[w]);
  const float lse = total.m + logf(total.s);
  const std::int32_t target = targets[row];
  const float target_logit = (target >= 0 && target < V) ? device::to_f32(x[target]) : NAN;
  losses[row] = lse - target_logit;
  row_max[row] = total.m;
  row_lse[row] = lse;
}

// No __restrict__ on dlogits/logits: they may alias (each element is read, then written, by
// the same thread).
template <class T>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_backward_kernel(bf16* dlogits, const float* __restrict__ dlosses,
                                  const T* logits, const float* __restrict__ row_lse,
                                  const std::int32_t* __restrict__ targets, int V, int ld,
                                  bool aligned) {
  const int row = blockIdx.x;
  const std::int64_t base = static_cast<std::int64_t>(row) * ld;
  const float lse = row_lse[row];
  const float dloss = dlosses[row];
  const std::int32_t target = targets[row];
  int tail = 0;  // first column left to the scalar loop
  if constexpr (sizeof(T) == 2) {
    // bf16 rows on 16-byte boundaries (ld % 8 == 0, checked by the launcher): 8 columns per
    // access below the last full vector; the rest, and never a column >= V, one by one.
    if (aligned) {
      constexpr int kV = device::kBf16PerVector;
      const int vectors = V / kV;
      for (int v = threadIdx.x; v < vectors; v += kThreads) {
        float x[kV];
        device::load8(reinterpret_cast<const bf16*>(logits) + base + v * kV, x);
#pragma unroll
        for (int e = 0; e < kV; ++e) {
          const int j = v * kV + e;
          x[e] = (expf(x[e] - lse) - (j == target ? 1.0f : 0.0f)) * dloss;
        }
        device::store8(dlogits + base + v * kV, x);
      }
      tail = vectors * kV;
    }
  }
  for (int j = tail + static_cast<int>(threadIdx.x); j < V; j += kThreads) {
    const float p = expf(device::to_f32(logits[base + j]) - lse);
    dlogits[base + j] = device::to_bf16((p - (j == target ? 1.0f : 0.0f)) * dloss);
  }
}

// ---------------------------------------------------------------------------------------
// Fused forward + backward: one block per row holds the whole row in registers (kSlots
// 16-byte vectors per thread), so the logits are read once and the gradient written once,
// in place (the separate kernels read them twice). Requires 16-byte aligned rows; the last
// vector may straddle V (its columns >= V lie in the padding and are written back unchanged).
constexpr int kFusedThreads = 1024;
constexpr int kFusedWarps = kFusedThreads / device::kWarpSize;
constexpr int kMaxFusedSlots = 8;  // rows up to 8 * 8 * 1024 = 65536 columns
constexpr float kLog2e = 1.4426950408889634f;

// Every thread gets the block's max (kMax) or sum of v; the sum adds the warps' partials in
// warp order, so it is the same on every run. `part` holds kFusedWarps floats.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* part) {
  v = kMax ? device::warp_max(v) : device::warp_sum(v);
  __syncthreads();  // an earlier call's readers are done with `part`
  if (threadIdx.x % device::kWarpSize == 0) part[threadIdx.x / device::kWarpSize] = v;
  __syncthreads();
  float r = part[0];
  for (int w = 1; w < kFusedWarps; ++w) r = kMax ? fmaxf(r, part[w]) : r + part[w];
  return r;
}

template <int kSlots>
__global__ void __launch_bounds__(kFusedThreads, 1)
    cross_entropy_fused_kernel(float* __restrict__ losses, float* __restrict__ row_max,
                               float* __restrict__ row_lse, bf16* __restrict__ logits,
                               const float* __restrict__ dlosses,
                               const std::int32_t* __restrict__ targets, int V, int ld) {
  __shared__ float part[kFusedWarps];
  constexpr int kV = device::kBf16PerVector;
  const int row = blockIdx.x;
  bf16* x = logits + static_cast<std::int64_t>(row) * ld;
  const int vectors = (V + kV - 1) / kV;
  const std::int32_t target = targets[row];
  // Read before any thread overwrites the row (the writes follow the block reductions' syncs).
  float target_logit = 0.0f;
  if (threadIdx.x == 0) target_logit = (target >= 0 && target < V) ? device::to_f32(x[target]) : NAN;
  uint4 raw[kSlots];
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int v = threadIdx.x + k * kFusedThreads;
    if (v < vectors) raw[k] = *reinterpret_cast<const uint4*>(x + v * kV);
  }
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int v = threadIdx.x + k * kFusedThreads;
    if (v >= vectors) continue;
    const bf16* h = reinterpret_cast<const bf16*>(&raw[k]);
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      if (v * kV + e < V) m = fmaxf(m, device::to_f32(h[e]));
    }
  }
  m = block_reduce<true>(m, part);
  const float m_log2 = m * kLog2e;
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int v = threadIdx.x + k * kFusedThreads;
    if (v >= vectors) continue;
    const bf16* h = reinterpret_cast<const bf16*>(&raw[k]);
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      if (v * kV + e < V) sum += exp2f(fmaf(device::to_f32(h[e]), kLog2e, -m_log2));
    }
  }
  sum = block_reduce<false>(sum, part);
  const float lse = m + logf(sum);
  const float lse_log2 = lse * kLog2e;
  const float dloss = dlosses[row];
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int v = threadIdx.x + k * kFusedThreads;
    if (v >= vectors) continue;
    bf16* h = reinterpret_cast<bf16*>(&raw[k]);
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      const int j = v * kV + e;
      if (j >= V) continue;  // padding: written back as it was
      const float p = exp2f(fmaf(device::to_f32(h[e]), kLog2e, -lse_log2));
      h[e] = device::to_bf16((p - (j == target ? 1.0f : 0.0f)) * dloss);
    }
    *reinterpret_cast<uint4*>(x + v * kV) = raw[k];
  }
  if (threadIdx.x == 0) {
    losses[row] = lse - target_logit;
    row_max[row] = m;
    row_lse[row] = lse;
  }
}

// ---------------------------------------------------------------------------------------
// Launchers

// ld: the row stride (0 = V, packed rows); a padded stride must be >= V.
int row_stride(const char* kName, int BT, int V, int ld) {
  detail::require_positive(kName, "BT", BT);
  detail::require_positive(kName, "V", V);
  detail::require_non_negative(kName, "ld", ld);
  if (ld != 0 && ld < V) {
    throw KernelError(fmt::format("{}: ld = {}; expected 0 (packed) or >= V = {}", kName, ld, V));
  }
  return ld == 0 ? V : ld;
}

template <class T>
void forward(float* losses, float* row_max, float* row_lse, const T* logits,
             const std::int32_t* targets, int BT, int V, int ld, cudaStream_t stream) {
  constexpr const char* kName = "cross_entropy_forward";
  detail::require_tensor(kName, "losses", losses);
  detail::require_tensor(kName, "row_max", row_max);
  detail::require_tensor(kName, "row_lse", row_lse);
  detail::require_tensor(kName, "logits", logits);
  detail::require_tensor(kName, "targets", targets);
  const int stride = row_stride(kName, BT, V, ld);
  cross_entropy_forward_kernel<T>
      <<<BT, kThreads, 0, stream>>>(losses, row_max, row_lse, logits, targets, V, stride);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void backward(bf16* dlogits, const float* dlosses, const T* logits, const float* row_lse,
              const std::int32_t* targets, int BT, int V, int ld, cudaStream_t stream) {
  constexpr const char* kName = "cross_entropy_backward";
  detail::require_tensor(kName, "dlogits", dlogits);
  detail::require_tensor(kName, "dlosses", dlosses);
  detail::require_tensor(kName, "logits", logits);
  detail::require_tensor(kName, "row_lse", row_lse);
  detail::require_tensor(kName, "targets", targets);
  const int stride = row_stride(kName, BT, V, ld);
  const auto on16 = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  const bool aligned = stride % device::kBf16PerVector == 0 && on16(dlogits) && on16(logits);
  cross_entropy_backward_kernel<T><<<BT, kThreads, 0, stream>>>(dlogits, dlosses, logits,
                                                                row_lse, targets, V, stride,
                                                                aligned);
  CUDA_CHECK_LAUNCH();
}

// The fused kernel's register slots for rows of V columns, or 0 when a row does not fit.
int fused_slots(int V) {
  const std::int64_t vectors = device::ceil_div(V, device::kBf16PerVector);
  return device::power_of_two_slots(device::ceil_div(vectors, kFusedThreads), kMaxFusedSlots);
}

}  // namespace

void cross_entropy_forward_backward(float* losses, float* row_max, float* row_lse,
                                    bf16* logits, const float* dlosses,
                                    const std::int32_t* targets, int BT, int V,
                                    cudaStream_t stream, int ld) {
  constexpr const char* kName = "cross_entropy_forward_backward";
  detail::require_tensor(kName, "losses", losses);
  detail::require_tensor(kName, "row_max", row_max);
  detail::require_tensor(kName, "row_lse", row_lse);
  detail::require_tensor(kName, "logits", logits);
  detail::require_tensor(kName, "dlosses", dlosses);
  detail::require_tensor(kName, "targets", targets);
  const int stride = row_stride(kName, BT, V, ld);
  const int slots = fused_slots(V);
  // The last 16-byte vector of a row may reach past V: it must stay inside the row's stride.
  const bool aligned = stride % device::kBf16PerVector == 0 &&
                       reinterpret_cast<std::uintptr_t>(logits) % 16 == 0;
  if (slots == 0 || !aligned) {
    forward(losses, row_max, row_lse, static_cast<const bf16*>(logits), targets, BT, V, ld,
            stream);
    backward(logits, dlosses, static_cast<const bf16*>(logits), row_lse, targets, BT, V, ld,
             stream);
    return;
  }
  device::with_slots<kMaxFusedSlots>(slots, [&](auto k) {
    cross_entropy_fused_kernel<decltype(k)::value><<<BT, kFusedThreads, 0, stream>>>(
        losses, row_max, row_lse, logits, dlosses, targets, V, stride);
  });
  CUDA_CHECK_LAUNCH();
}

void cross_entropy_forward(float* losses, float* row_max, float* row_lse, const bf16* logits,
                           const std::int32_t* targets, int BT, int V, cudaStream_t stream, int ld) {
  forward(losses, row_max, row_lse, logits, targets, BT, V, ld, stream);
}

void cross_entropy_forward(float* losses, float* row_max, float* row_lse, const float* logits,
                           const std::int32_t* targets, int BT, int V, cudaStream_t stream, int ld) {
  forward(losses, row_max, row_lse, logits, targets, BT, V, ld, stream);
}

void cross_entropy_backward(bf16* dlogits, const float* dlosses, const bf16* logits,
                            const float* row_lse, const std::int32_t* targets, int BT, int V,
                            cudaStream_t stream, int ld) {
  backward(dlogits, dlosses, logits, row_lse, targets, BT, V, ld, stream);
}

void cross_entropy_backward(bf16* dlogits, const float* dlosses, const float* logits,
                            const float* row_lse, const std::int32_t* targets, int BT, int V,
                            cudaStream_t stream, int ld) {
  backward(dlogits, dlosses, logits, row_lse, targets, BT, V, ld, stream);
}

}  // namespace strata::kernels::cuda
