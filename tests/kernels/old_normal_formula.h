// The counter-based normal draw as param_init.cc wrote it at commit e7b0168 (four splitmix64,
// glibc's log and cos), restated for the tests of the bulk draw (kernels) and of parameter
// initialisation (executor), so that neither shares code with what it checks.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace strata::testing_support {

inline std::uint64_t old_splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
inline double old_uniform_at(std::uint64_t key, std::int64_t index) {
  const std::uint64_t bits = old_splitmix64(key ^ old_splitmix64(static_cast<std::uint64_t>(index)));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}
inline double old_normal_at(std::uint64_t key, std::int64_t index) {
  const double u1 = 1.0 - old_uniform_at(key, 2 * index);
  const double u2 = old_uniform_at(key, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace strata::testing_support
