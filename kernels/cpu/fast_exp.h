// A single-precision exp that the compiler vectorises: the softmax of the CPU attention calls
// it once per score, and libm's expf is a scalar call per element (the issue 19 profile had
// the attention at ~13 GFLOP/s with expf in it). Inline and branch-free (selects only), so
// that an `omp simd` loop over it becomes packed arithmetic.
//
// Method (Cephes expf): x = n ln2 + r with n = round(x / ln2), |r| <= ln2 / 2, ln2 split in
// two parts (Cody-Waite) so that r is exact to a few ulp; e^r = 1 + r + r^2 P(r) with P of
// degree 5 (Cephes' minimax coefficients); 2^n is built from exponent bits as two factors
// 2^(n/2) 2^(n - n/2), so that n down to -150 (denormal results) needs no special case.
//
// Accuracy (tests/kernels/fast_exp_test.cc sweeps every 97th float of the domain against
// exp in double): max relative error 7.9e-8 measured, 1.5e-7 tested (libm's expf: within
// 1 ulp, 1.2e-7) for x in [-87.33, 88.72], where the result is a normal float. Below -87.33 the
// result is denormal (absolute error below 1.2e-38, which softmax cannot see), below
// -104 it is 0, -inf gives 0; above 88.7228 it is +inf; NaN gives NaN.
#pragma once

#include <bit>
#include <cstdint>

namespace strata::kernels::cpu {

inline float fast_expf(float x) {
  constexpr float kMaxArg = 88.72283905206835f;  // ln(FLT_MAX): larger overflows to +inf
  constexpr float kMinArg = -104.0f;             // exp(-104) is below half the least denormal
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;         // ln2 = kLn2Hi + kLn2Lo; kLn2Hi has 9 bits,
  constexpr float kLn2Lo = -2.12194440e-4f;      // so n * kLn2Hi is exact for |n| < 2^15
  constexpr float kRound = 12582912.0f;          // 1.5 * 2^23: adding it rounds to an integer
  // Clamped so that n below is a small integer; a NaN x becomes kMaxArg here (each compare
  // is written so that NaN takes the clamp), keeping the float-to-int conversion defined.
  const float xa = x < kMaxArg ? x : kMaxArg;
  const float xc = xa > kMinArg ? xa : kMinArg;
  const float n = (xc * kLog2e + kRound) - kRound;  // round to nearest, no libm call
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = (p * (r * r) + r) + 1.0f;
  // 2^n in two halves, each a normal float for n in [-150, 128].
  const std::int32_t ni = static_cast<std::int32_t>(n);
  const std::int32_t n1 = ni >> 1;
  const std::int32_t n2 = ni - n1;
  const float s1 = std::bit_cast<float>((n1 + 127) << 23);
  const float s2 = std::bit_cast<float>((n2 + 127) << 23);
  const float y = er * s1 * s2;
  // Out-of-range inputs: +inf above, 0 below, NaN as itself.
  const float clamped = x > kMaxArg ? __builtin_inff() : (x < kMinArg ? 0.0f : y);
  return x != x ? x : clamped;
}

}  // namespace strata::kernels::cpu
