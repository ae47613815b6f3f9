// init_unit_range (executor/model/param_init.h) restated as the plainest loop: element by
// element, the formula of tests/kernels/normal_formula.h, so that the tests of parameter
// initialisation share no drawing code with what they check (only the layout and the
// tensor keys, which they take as given).
#pragma once

#include <algorithm>
#include <cstdint>

#include "cost_model/specs/param_layout.h"
#include "executor/model/param_init.h"
#include "tests/kernels/normal_formula.h"

namespace strata::testing_support {

// dst[i - begin] for the unit's flat elements [begin, end): zero past the unit's count
// (ZeRO padding) and in padding rows, else the segment's init.
inline void reference_init_unit_range(const UnitLayout& unit, std::uint64_t seed, float* dst,
                                      std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) dst[i - begin] = 0.0f;
  for (const auto& s : unit.segments) {
    const std::int64_t lo = std::max(begin, s.offset);
    const std::int64_t hi = std::min(end, s.offset + s.count());
    if (lo >= hi) continue;
    const std::uint64_t key = model::tensor_key(seed, s.code, s.layer);
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
            value = static_cast<float>(s.init_std * reference_normal_at(key, s.global_index(r, c)));
            break;
        }
      }
      dst[i - begin] = value;
    }
  }
}

}  // namespace strata::testing_support
