// The counter-based normal draw (kernels/counter_normal.h's formula since issue 25: a pair
// of elements takes Box-Muller's two outputs) written plainly with glibc's log, cos and sin
// in double, for the tests of the bulk draw (kernels) and of parameter initialisation
// (executor), so that neither shares code with what it checks.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace strata::testing_support {

inline std::uint64_t reference_splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
inline double reference_uniform(std::uint64_t key, std::uint64_t counter) {
  const std::uint64_t bits = reference_splitmix64(key ^ reference_splitmix64(counter));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}
// Element `index`: elements 2k and 2k + 1 are r cos(theta) and r sin(theta) of the uniforms
// of counters 2k and 2k + 1.
inline double reference_normal_at(std::uint64_t key, std::int64_t index) {
  const auto pair = static_cast<std::uint64_t>(index / 2);
  const double u1 = 1.0 - reference_uniform(key, 2 * pair);
  const double u2 = reference_uniform(key, 2 * pair + 1);
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  return index % 2 == 0 ? r * std::cos(theta) : r * std::sin(theta);
}

}  // namespace strata::testing_support
