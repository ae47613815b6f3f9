// Tanh-approximation GeLU forward/backward (see gelu.h).
#include "kernels/cpu/gelu.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/arg_checks.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/parallel.h"

namespace strata::kernels::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kCubic = 0.044715f;

// tanh in plain float arithmetic, so that the loops below vectorize: libm's tanhf is a scalar
// call of ~50 cycles, and with it the GeLU was half of the tiny model's forward on the CPU
// backend. tanh(u) = sign(u) (1 - e) / (1 + e) with e = exp(-2|u|) in (0, 1]; the absolute
// error stays within a few float ulps of 1 (what 1 + tanh and 1 - tanh^2 need), checked
// against double precision in tests/kernels/gelu_test.cc.
[[gnu::always_inline]] inline float fast_tanh(float u) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;     // ln 2 split so that n * kLn2Hi is exact
  constexpr float kLn2Lo = 1.428606765330187e-06f;
  constexpr float kRound = 12582912.0f;            // 1.5 * 2^23: adding it rounds to an integer
  // z = -2|u| in [-87, 0]: below -87, e < 2^-125 and tanh is 1 in float anyway.
  const float a = -2.0f * std::fabs(u);
  const float z = a < -87.0f ? -87.0f : a;
  // exp(z) = 2^n exp(r), n = round(z / ln 2), |r| <= ln 2 / 2; exp(r) by its Taylor series to
  // r^7 (truncation < 0.35^8 / 8! = 5e-9).
  const float shifted = z * kLog2e + kRound;
  const float n = shifted - kRound;
  const float r = (z - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t exponent = static_cast<std::int32_t>(n) + 127;  // n >= -126: a normal float
  const float e = p * std::bit_cast<float>(exponent << 23);
  const float t = (1.0f - e) / (1.0f + e);
  return std::copysign(t, u);
}

// d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx,
// du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2), sech^2 = 1 - tanh^2.
[[gnu::always_inline]] inline float gelu_grad(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  const float th = fast_tanh(u);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

// Each loop body is compiled for baseline x86-64 (SSE2: 4 lanes) and for AVX-512 (16) (see
// isa.h): with 4 lanes the GeLU was 10% of a 4-layer GPT's step. gelu.cc is compiled without
// FMA contraction, so both versions give the same bits.
[[gnu::always_inline]] inline void forward_span(float* out, const float* inp, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + fast_tanh(u));
  }
}

[[gnu::always_inline]] inline void backward_span(float* dinp, const float* inp,
                                                 const float* dout, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) dinp[i] += gelu_grad(inp[i]) * dout[i];
}

[[gnu::always_inline]] inline void backward_in_place_span(float* d, const float* inp,
                                                          std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) d[i] *= gelu_grad(inp[i]);
}

STRATA_TARGET_AVX512 void forward_avx512(float* out, const float* inp, std::int64_t n) {
  forward_span(out, inp, n);
}
STRATA_TARGET_AVX512 void backward_avx512(float* dinp, const float* inp, const float* dout,
                                   std::int64_t n) {
  backward_span(dinp, inp, dout, n);
}
STRATA_TARGET_AVX512 void backward_in_place_avx512(float* d, const float* inp, std::int64_t n) {
  backward_in_place_span(d, inp, n);
}

void forward_baseline(float* out, const float* inp, std::int64_t n) {
  forward_span(out, inp, n);
}
void backward_baseline(float* dinp, const float* inp, const float* dout, std::int64_t n) {
  backward_span(dinp, inp, dout, n);
}
void backward_in_place_baseline(float* d, const float* inp, std::int64_t n) {
  backward_in_place_span(d, inp, n);
}


}  // namespace

void gelu_forward(float* out, const float* inp, std::int64_t N, Isa isa) {
  detail::require_tensor("gelu_forward", "out", out);
  detail::require_tensor("gelu_forward", "inp", inp);
  detail::require_non_negative("gelu_forward", "N", N);
  const bool wide = use_avx512(isa, "gelu_forward");
  parallel_spans(N, [&](std::int64_t i, std::int64_t n) {
    (wide ? forward_avx512 : forward_baseline)(out + i, inp + i, n);
  });
}

void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t N,
                   Isa isa) {
  detail::require_tensor("gelu_backward", "dinp", dinp);
  detail::require_tensor("gelu_backward", "inp", inp);
  detail::require_tensor("gelu_backward", "dout", dout);
  detail::require_non_negative("gelu_backward", "N", N);
  const bool wide = use_avx512(isa, "gelu_backward");
  parallel_spans(N, [&](std::int64_t i, std::int64_t n) {
    (wide ? backward_avx512 : backward_baseline)(dinp + i, inp + i, dout + i, n);
  });
}

void gelu_backward_in_place(float* d, const float* inp, std::int64_t N, Isa isa) {
  detail::require_tensor("gelu_backward_in_place", "d", d);
  detail::require_tensor("gelu_backward_in_place", "inp", inp);
  detail::require_non_negative("gelu_backward_in_place", "N", N);
  const bool wide = use_avx512(isa, "gelu_backward_in_place");
  parallel_spans(N, [&](std::int64_t i, std::int64_t n) {
    (wide ? backward_in_place_avx512 : backward_in_place_baseline)(d + i, inp + i, n);
  });
}

}  // namespace strata::kernels::cpu
