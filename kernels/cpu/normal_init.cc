// Counter-based normal draws in bulk (see normal_init.h and kernels/counter_normal.h).
#include "kernels/cpu/normal_init.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/counter_normal.h"
#include "kernels/check.h"
#include "kernels/cpu/arg_checks.h"

namespace strata::kernels::cpu {
namespace {

// Elements per pass: the estimates of a block, then the exact formula where they declined.
constexpr std::int64_t kBlock = 64;

// The two counters' bits of elements [first, first + n), as scalar code in a function of
// its own, compiled for baseline x86-64 and called by both versions of the loop below: a
// 64-bit multiply has no vector instruction before AVX-512, and the AVX2 clone's emulation
// of it (GCC vectorises this loop there when it is inlined) was slower than the scalar
// multiplier: 19.5 against 22.4 ns an element for the whole draw on one Zen 1 thread
// (thread CPU time, 16M elements). The call costs nothing beside 64 elements' hashes.
[[gnu::noinline]] void hash_block(std::uint64_t* bits1, std::uint64_t* bits2, std::uint64_t key,
                                  std::int64_t first, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) {
    const auto counter = 2 * static_cast<std::uint64_t>(first + j);
    bits1[j] = counter_bits(key, counter);
    bits2[j] = counter_bits(key, counter + 1);
  }
}

// The loop body both compiled versions inline; the estimate's double arithmetic vectorises.
[[gnu::always_inline]] inline void fill_block(float* dst, std::uint64_t key, std::int64_t first,
                                              std::int64_t n, double scale) {
  std::uint64_t bits1[kBlock], bits2[kBlock];
  double value[kBlock];
  hash_block(bits1, bits2, key, first, n);
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j) value[j] = normal_estimate(bits1[j], bits2[j], scale);
  for (std::int64_t j = 0; j < n; ++j) {
    const double v = value[j];
    dst[j] = static_cast<float>(v == v ? v : scale * normal_exact(key, first + j));
  }
}

[[gnu::always_inline]] inline void fill_blocks(float* dst, std::uint64_t key, std::int64_t first,
                                               std::int64_t n, double scale) {
  for (std::int64_t b = 0; b < n; b += kBlock) {
    fill_block(dst + b, key, first + b, std::min(kBlock, n - b), scale);
  }
}

void fill_baseline(float* dst, std::uint64_t key, std::int64_t first, std::int64_t n,
                   double scale) {
  fill_blocks(dst, key, first, n, scale);
}

__attribute__((target("avx2,fma"))) void fill_avx2(float* dst, std::uint64_t key,
                                                   std::int64_t first, std::int64_t n,
                                                   double scale) {
  fill_blocks(dst, key, first, n, scale);
}

bool cpu_has_avx2_fma() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

}  // namespace

// Not inlined into the AVX2 loop: this is the reference, compiled once, for baseline x86-64.
[[gnu::noinline]] double normal_exact(std::uint64_t key, std::int64_t index) {
  const auto counter = 2 * static_cast<std::uint64_t>(index);
  const double u1 = 1.0 - static_cast<double>(counter_bits(key, counter) >> 11) * 0x1.0p-53;
  const double u2 = static_cast<double>(counter_bits(key, counter + 1) >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

void normal_fill(float* dst, std::uint64_t key, std::int64_t first, std::int64_t n,
                 double scale, NormalFillPath path) {
  detail::require_non_negative("normal_fill", "n", n);
  if (n == 0) return;
  detail::require_tensor("normal_fill", "dst", dst);
  if (path == NormalFillPath::kBest && cpu_has_avx2_fma()) {
    fill_avx2(dst, key, first, n, scale);
  } else {
    fill_baseline(dst, key, first, n, scale);
  }
}

}  // namespace strata::kernels::cpu
