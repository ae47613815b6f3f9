// Counter-based normal draws, the arithmetic shared by the CPU and CUDA initialisers
// (kernels/cpu/normal_init.h, kernels/cuda/normal_init.h). Element i of the tensor keyed
// `key` belongs to pair k = floor(i / 2), and a pair's two elements are Box-Muller's two
// outputs of one pair of uniforms:
//   bits(c)  = splitmix64(key ^ splitmix64(c))                 counters c = 2k, 2k + 1
//   u1       = 1 - (bits(2k) >> 11) 2^-53                       in (0, 1]: the log is finite
//   u2       = (bits(2k + 1) >> 11) 2^-53                       in [0, 1)
//   r        = sqrt(-2 log u1),  theta = 2 pi u2                 glibc's log; theta one rounding
//   value(2k)     = float(scale * (r cos theta))                 glibc's cos
//   value(2k + 1) = float(scale * (r sin theta))                 glibc's sin
// (Issue 25 halved the draw so: before it, every element hashed a pair of counters of its
// own and kept only the cosine. Every golden drawn from a seed was re-recorded then.) A
// row of a shard may begin or end at an odd global index: the pair is drawn whole and the
// element the row holds is kept, so a value never depends on the plan, shard or thread.
// glibc's log, cos and sin cost ~50 ns a pair and do not vectorise, and the GPU's differ
// from them in the last bit of a double now and then. So both initialisers compute the
// values with normal_pair_estimate() below (vectorisable arithmetic, the same on host and
// device) and keep each only where that is provably the float glibc's formula gives; the
// few elements where it is not (about 1 in 1,000) take the exact formula (normal_init.h's
// normal_exact, on the host).
//
// Why the estimate's float is glibc's float. u1, u2 and theta = (2 pi) u2 are the same
// doubles in both (integer hashing, an exact subtraction, one rounded product). The
// estimate reduces theta = k pi/2 + x, |x| <= pi/4, once for both outputs: cos theta is
// cos x, -sin x, -cos x, sin x and sin theta is sin x, cos x, -sin x, -cos x for k mod 4 =
// 0..3, so each output is one of the same two series (with a sign), and one bound serves
// both. Against the exact value the estimate's relative error is under 2^-42 (2^-44.3 the
// worst of 6M draws measured): the log's series (below) to 2^-44, tripled at most where
// e ln2 and log f partly cancel and halved by the square root; the sine and cosine series
// to 2^-45; the reduction of theta to |x| <= pi/4 to 2^-70 absolute; a dozen roundings of
// 2^-53. glibc's own error is under 2^-51 (log, cos and sin < 1 ulp, three roundings). So
// the exact formula's double lies within kNormalTolerance = 2^-36 (relative) of the
// estimate, and when both ends of that interval round to the same float, so does it
// (rounding is monotone). Where an output is sin x (a zero of cos theta or of sin theta
// nearby), an absolute error in x is a large relative one: both outputs of a pair with
// |x| < 2^-12 are left to the exact formula (3 in 10,000 pairs; as are the elements
// within the tolerance of a float rounding boundary). Beyond that even a compiler that
// fuses theta's product into x's subtraction (FMA contraction, theta then unrounded: 2^-51
// absolute) stays within 2^-39 relative; nothing else in the estimate needs exact roundings.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/host_device.h"

namespace strata::kernels {

// SplitMix64 (Steele, Lea, Flood 2014): a bijective 64-bit mixer, used as a counter-based
// generator: splitmix64(key) for key = 0, 1, 2, ... is a well-distributed sequence.
STRATA_HOST_DEVICE std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The 64 random bits of counter c under key.
STRATA_HOST_DEVICE std::uint64_t counter_bits(std::uint64_t key, std::uint64_t c) {
  return splitmix64(key ^ splitmix64(c));
}

namespace normal_detail {

STRATA_HOST_DEVICE double as_double(std::uint64_t u) {
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}
STRATA_HOST_DEVICE std::uint64_t as_bits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

}  // namespace normal_detail

// (bits >> 11) 2^-53, exactly, without a 64-bit integer conversion (none vectorises before
// AVX-512): the top 52 bits as a double's mantissa in [1, 2), minus 1, plus the 53rd bit's
// 2^-53 (the sum is a multiple of 2^-53 below 1: exact).
STRATA_HOST_DEVICE double unit53(std::uint64_t bits) {
  using normal_detail::as_double;
  const double high = as_double((bits >> 12) | 0x3FF0000000000000ull) - 1.0;
  const double low = as_double(((bits >> 11) & 1) * 0x3CA0000000000000ull);  // 0 or 2^-53
  return high + low;
}

inline constexpr double kNormalTolerance = 0x1.0p-36;

// A pair's two values (elements 2k and 2k + 1), each its estimate or a NaN where only the
// exact formula can say which float it is.
struct NormalPair {
  double even, odd;
};

// The estimate of one output, or a NaN (see the top of this file). Branch-free.
STRATA_HOST_DEVICE double decided_or_nan(double value, bool near_zero) {
  // The interval's ends rounded to float (held as doubles: the compare stays 64 bits wide).
  const double low = static_cast<float>(value - value * kNormalTolerance);
  const double high = static_cast<float>(value + value * kNormalTolerance);
  const bool undecided = (low != high) | near_zero;
  return undecided ? normal_detail::as_double(0x7FF8000000000000ull) : value;
}

// The pair's values from its two counters' bits. Branch-free: it vectorises.
STRATA_HOST_DEVICE NormalPair normal_pair_estimate(std::uint64_t bits1, std::uint64_t bits2,
                                                   double scale) {
  using normal_detail::as_bits;
  using normal_detail::as_double;
  const double u1 = 1.0 - unit53(bits1);
  const double u2 = unit53(bits2);
  // log u1 = e ln2 + log f with f in [sqrt(1/2), sqrt(2)) (musl's split: subtracting the bits
  // of sqrt(1/2) moves the exponent boundary there; 2048 keeps the difference unsigned), and
  // log f = 2 atanh(s), s = (f - 1) / (f + 1), |s| <= 0.1716: the series to s^15 leaves
  // s^16 / 17 < 2^-44 of it.
  constexpr std::uint64_t kSqrtHalf = 0x3FE6A09E667F3BCDull;
  const std::uint64_t ub = as_bits(u1);
  const std::uint64_t t = ub - kSqrtHalf + (2048ull << 52);
  const double f = as_double(ub - (t & 0xFFF0000000000000ull) + (2048ull << 52));
  const double e = as_double(0x4330000000000000ull | (t >> 52)) - (0x1.0p52 + 2048.0);
  const double s = (f - 1.0) / (f + 1.0);
  const double z = s * s;
  double p = 1.0 / 15;
  p = p * z + 1.0 / 13;
  p = p * z + 1.0 / 11;
  p = p * z + 1.0 / 9;
  p = p * z + 1.0 / 7;
  p = p * z + 1.0 / 5;
  p = p * z + 1.0 / 3;
  const double log_u1 = e * 0x1.62E42FEFA39EFp-1 + (2.0 * s + 2.0 * s * (z * p));
  const double radius = std::sqrt(-2.0 * log_u1);
  // theta = k pi/2 + x, |x| <= pi/4 (+ an ulp), pi/2 in two parts (the first of 33 bits,
  // so k times it is exact and theta - k P1 is exact by Sterbenz for k >= 1). Taylor series
  // to x^13 and x^14 leave (pi/4)^15 / 15! and (pi/4)^16 / 16! (< 2^-45 relative).
  constexpr double kTwoPi = 2.0 * 3.14159265358979323846;
  constexpr double kTwoOverPi = 0.63661977236758134308;
  constexpr double kRound = 0x1.8p52;  // adding it rounds to an integer held in the low bits
  constexpr double kPiHalf1 = 0x1.921FB544p0;
  constexpr double kPiHalf2 = 0x1.0B4611A626331p-34;
  const double theta = kTwoPi * u2;
  const double k_rounded = theta * kTwoOverPi + kRound;
  const std::uint64_t k = as_bits(k_rounded);
  const double kd = k_rounded - kRound;
  const double x = (theta - kd * kPiHalf1) - kd * kPiHalf2;
  const double x2 = x * x;
  double sp = 1.0 / 6227020800.0;
  sp = sp * x2 - 1.0 / 39916800.0;
  sp = sp * x2 + 1.0 / 362880.0;
  sp = sp * x2 - 1.0 / 5040.0;
  sp = sp * x2 + 1.0 / 120.0;
  sp = sp * x2 - 1.0 / 6.0;
  const std::uint64_t sin_x = as_bits(x + x * (x2 * sp));
  double cp = -1.0 / 87178291200.0;
  cp = cp * x2 + 1.0 / 479001600.0;
  cp = cp * x2 - 1.0 / 3628800.0;
  cp = cp * x2 + 1.0 / 40320.0;
  cp = cp * x2 - 1.0 / 720.0;
  cp = cp * x2 + 1.0 / 24.0;
  cp = cp * x2 - 0.5;
  const std::uint64_t cos_x = as_bits(1.0 + x2 * cp);
  // k odd swaps the series: cos theta = -+sin x, sin theta = +-cos x there.
  const std::uint64_t odd = 0 - (k & 1);  // all ones for k = 1, 3
  const double cos_theta =
      as_double(((sin_x & odd) | (cos_x & ~odd)) ^ (((k + 1) & 2) << 62));  // - for k = 1, 2
  const double sin_theta =
      as_double(((cos_x & odd) | (sin_x & ~odd)) ^ ((k & 2) << 62));  // - for k = 2, 3
  const bool near_zero = x2 < 0x1.0p-24;
  return {decided_or_nan(scale * (radius * cos_theta), near_zero),
          decided_or_nan(scale * (radius * sin_theta), near_zero)};
}

}  // namespace strata::kernels
