// Counter-based normal draws in bulk (see normal_init.h and kernels/counter_normal.h).
#include "kernels/cpu/normal_init.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/counter_normal.h"
#include "kernels/check.h"
#include "kernels/cpu/arg_checks.h"
#include "kernels/cpu/isa.h"

namespace strata::kernels::cpu {
namespace {

// Pairs per pass: the estimates of a block, then the exact formula where they declined.
constexpr std::int64_t kPairs = 64;

// The two counters' bits of pairs [first_pair, first_pair + n), as scalar code in a
// function of its own, compiled for baseline x86-64 and called by both versions of the loop
// below: a 64-bit multiply has no vector instruction before AVX-512, and the AVX2 clone's
// emulation of it (GCC vectorises this loop there when it is inlined) was slower than the
// scalar multiplier: 19.5 against 22.4 ns an element for the whole draw on one Zen 1 thread
// (thread CPU time, 16M elements, a pair for each element then). The call costs nothing beside
// 64 pairs' hashes.
[[gnu::noinline]] void hash_block(std::uint64_t* bits1, std::uint64_t* bits2, std::uint64_t key,
                                  std::int64_t first_pair, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) {
    const auto counter = 2 * static_cast<std::uint64_t>(first_pair + j);
    bits1[j] = counter_bits(key, counter);
    bits2[j] = counter_bits(key, counter + 1);
  }
}

// Elements [lo, hi) (global indices) of pairs [first_pair, first_pair + n_pairs), written
// to dst[lo - first ...]. The loop body both compiled versions inline; the estimate's double
// arithmetic vectorises.
[[gnu::always_inline]] inline void fill_block(float* dst, std::uint64_t key, std::int64_t first,
                                              std::int64_t first_pair, std::int64_t n_pairs,
                                              std::int64_t lo, std::int64_t hi, double scale) {
  std::uint64_t bits1[kPairs], bits2[kPairs];
  double value[2 * kPairs];  // value[i - 2 first_pair] is element i's
  hash_block(bits1, bits2, key, first_pair, n_pairs);
#pragma omp simd
  for (std::int64_t j = 0; j < n_pairs; ++j) {
    const NormalPair pair = normal_pair_estimate(bits1[j], bits2[j], scale);
    value[2 * j] = pair.even;
    value[2 * j + 1] = pair.odd;
  }
  // Every element converted (a NaN stays one), then the few undecided ones redrawn: two
  // passes, so that the first vectorises.
  const double* from = value + (lo - 2 * first_pair);
  float* to = dst + (lo - first);
  const std::int64_t n = hi - lo;
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j) to[j] = static_cast<float>(from[j]);
  for (std::int64_t j = 0; j < n; ++j) {
    if (from[j] != from[j]) to[j] = static_cast<float>(scale * normal_exact(key, lo + j));
  }
}

// Elements [first, first + n): the pairs that hold them, whole, a block at a time (a row
// that begins or ends at an odd index draws its end pairs' other element and drops it).
[[gnu::always_inline]] inline void fill_blocks(float* dst, std::uint64_t key, std::int64_t first,
                                               std::int64_t n, double scale) {
  const std::int64_t end = first + n;
  const std::int64_t end_pair = (end + 1) / 2;
  for (std::int64_t p = first / 2; p < end_pair; p += kPairs) {
    const std::int64_t n_pairs = std::min(kPairs, end_pair - p);
    fill_block(dst, key, first, p, n_pairs, std::max(first, 2 * p),
               std::min(end, 2 * (p + n_pairs)), scale);
  }
}

void fill_baseline(float* dst, std::uint64_t key, std::int64_t first, std::int64_t n,
                   double scale) {
  fill_blocks(dst, key, first, n, scale);
}

STRATA_TARGET_AVX2 void fill_avx2(float* dst, std::uint64_t key, std::int64_t first,
                                  std::int64_t n, double scale) {
  fill_blocks(dst, key, first, n, scale);
}


}  // namespace

// Not inlined into the AVX2 loop: this is the reference, compiled once, for baseline x86-64.
[[gnu::noinline]] double normal_exact(std::uint64_t key, std::int64_t index) {
  const auto counter = 2 * (static_cast<std::uint64_t>(index) / 2);  // the pair's first
  const double u1 = 1.0 - static_cast<double>(counter_bits(key, counter) >> 11) * 0x1.0p-53;
  const double u2 = static_cast<double>(counter_bits(key, counter + 1) >> 11) * 0x1.0p-53;
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  return radius * (index % 2 == 0 ? std::cos(theta) : std::sin(theta));
}

void normal_fill(float* dst, std::uint64_t key, std::int64_t first, std::int64_t n,
                 double scale, NormalFillPath path) {
  detail::require_non_negative("normal_fill", "n", n);
  detail::require_non_negative("normal_fill", "first", first);  // a global index: pairs from 0
  if (n == 0) return;
  detail::require_tensor("normal_fill", "dst", dst);
  if (path == NormalFillPath::kBest && active_isa_level() >= IsaLevel::kAvx2) {
    fill_avx2(dst, key, first, n, scale);
  } else {
    fill_baseline(dst, key, first, n, scale);
  }
}

}  // namespace strata::kernels::cpu
