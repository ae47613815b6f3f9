// Counter-based normal and uniform draws (see param_init.h).
#include "executor/model/param_init.h"

#include <algorithm>
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

void init_unit_range(const UnitLayout& unit, std::uint64_t seed, float* dst, std::int64_t begin,
                     std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) dst[i - begin] = 0.0f;
  for (const auto& s : unit.segments) {
    const std::int64_t lo = std::max(begin, s.offset);
    const std::int64_t hi = std::min(end, s.offset + s.count());
    if (lo >= hi) continue;
    const std::uint64_t key = tensor_key(seed, s.code, s.layer);
    for (std::int64_t i = lo; i < hi; ++i) {
      const std::int64_t local = i - s.offset;
      const std::int64_t r = local / s.cols;
      const std::int64_t c = local % s.cols;
      float value = 0.0f;
      if (r < s.valid_rows) {
        switch (s.init) {
          case InitKind::kOnes: value = 1.0f; break;
          case InitKind::kZeros: value = 0.0f; break;
          case InitKind::kNormal:
            value = static_cast<float>(s.init_std * normal_at(key, s.global_index(r, c)));
            break;
        }
      }
      dst[i - begin] = value;
    }
  }
}

}  // namespace strata::model
