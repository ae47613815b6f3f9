// Device-side helpers shared by the .cu files: warp reductions, bf16 <-> fp32 conversions and
// the tanh-approximation GeLU (the same formula as kernels/cpu/gelu.h). Header-only device
// code; it deliberately holds no launchers and no host logic.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>

namespace strata::kernels::cuda::device {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpSize = 32;

__device__ __forceinline__ float warp_sum(float x) {
  // Butterfly: every lane ends with the same total, summed in the same order on each run.
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset >>= 1)
    x = fmaxf(x, __shfl_xor_sync(kFullMask, x, offset));
  return x;
}

__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ __nv_bfloat16 to_bf16(float x) { return __float2bfloat16_rn(x); }

// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// d gelu / dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
__device__ __forceinline__ float gelu_grad(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  const float th = tanhf(u);
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
}

// Grid size for n items at `per_block` items per block, capped for grid-stride loops.
__host__ __device__ constexpr std::int64_t ceil_div(std::int64_t n, std::int64_t d) {
  return (n + d - 1) / d;
}

// 16-byte vector access to 8 consecutive bf16 (the pointer must be 16-byte aligned): one
// load or store instruction instead of eight.
inline constexpr int kBf16PerVector = 8;
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&out)[kBf16PerVector]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
  for (int e = 0; e < kBf16PerVector; ++e) out[e] = __bfloat162float(h[e]);
}
__device__ __forceinline__ void store8(__nv_bfloat16* p, const float (&in)[kBf16PerVector]) {
  uint4 raw;
  __nv_bfloat16* h = reinterpret_cast<__nv_bfloat16*>(&raw);
#pragma unroll
  for (int e = 0; e < kBf16PerVector; ++e) h[e] = __float2bfloat16_rn(in[e]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// Kernels that keep a row in registers are templates on their register slots (16-byte
// vectors per thread): the smallest power of two >= needed, up to max_slots (0: too many).
inline int power_of_two_slots(std::int64_t needed, int max_slots) {
  for (int slots = 1; slots <= max_slots; slots *= 2) {
    if (needed <= slots) return slots;
  }
  return 0;
}

// Calls f(std::integral_constant<int, s>{}) with s the first power of two >= slots, at most
// kMaxSlots (only those instantiations are compiled).
template <int kMaxSlots, int kSlots = 1, class F>
void with_slots(int slots, F&& f) {
  if constexpr (kSlots >= kMaxSlots) {
    f(std::integral_constant<int, kMaxSlots>{});
  } else if (slots <= kSlots) {
    f(std::integral_constant<int, kSlots>{});
  } else {
    with_slots<kMaxSlots, 2 * kSlots>(slots, f);
  }
}

}  // namespace strata::kernels::cuda::device
