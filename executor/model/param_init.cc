// Counter-based normal and uniform draws (see param_init.h).
#include "executor/model/param_init.h"

#include <cmath>
#include <numbers>

namespace strata::model {

std::uint64_t tensor_key(std::uint64_t seed, int tensor_code, std::int64_t layer) {
  std::uint64_t k = splitmix64(seed);
  k = splitmix64(k ^ (static_cast<std::uint64_t>(tensor_code) << 48));
  return splitmix64(k ^ static_cast<std::uint64_t>(layer + 1));
}

double uniform_at(std::uint64_t key, std::int64_t index) {
  const std::uint64_t bits = splitmix64(key ^ splitmix64(static_cast<std::uint64_t>(index)));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

double normal_at(std::uint64_t key, std::int64_t index) {
  // Two independent counters per element: 2*index and 2*index + 1.
  const double u1 = 1.0 - uniform_at(key, 2 * index);  // (0, 1]: log is finite
  const double u2 = uniform_at(key, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace strata::model
