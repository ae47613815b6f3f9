// The one map between a rank's flat unit buffer and the full tensors of the single-rank
// model: local element i of segment s is row R, column C of the full tensor (R, C from
// ParamSegment::global_index, the rule the seeded init and every plan share). Loading
// weights, saving weights and resharding checkpoints all go through it, so a slice means
// the same thing to each of them. Vocabulary padding rows have no full element and are
// skipped (they stay zero); the tied wte copy's full tensor is the embedding's wte.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>

#include "cost_model/specs/param_layout.h"
#include "executor/model/param_init.h"

namespace strata::weights {

// The unit whose full tensors `unit` holds a slice of ("embedding" for the tied copy).
std::string full_owner(const UnitLayout& unit);

// Calls f(segment, flat index i, R, C) for every element i in [begin, end) of `unit` that
// is an element of a full tensor, in flat order.
template <class F>
void for_each_full_element(const UnitLayout& unit, std::int64_t begin, std::int64_t end, F&& f) {
  for (const ParamSegment& s : unit.segments) {
    const std::int64_t lo = std::max(begin, s.offset);
    const std::int64_t hi = std::min(end, s.offset + s.count());
    for (std::int64_t i = lo; i < hi; ++i) {
      const std::int64_t local = i - s.offset;
      const std::int64_t r = local / s.cols, c = local % s.cols;
      if (r >= s.valid_rows) continue;  // vocabulary padding
      const std::int64_t global = s.global_index(r, c);
      f(s, i, global / s.global_cols, global % s.global_cols);
    }
  }
}

// Full-tensor element (R, C) of one segment.
using SegmentValues = std::function<float(std::int64_t row, std::int64_t col)>;
// The values of segment s of the full unit `owner` (full_owner of the rank's unit).
using FullTensorSource =
    std::function<SegmentValues(const std::string& owner, const ParamSegment& s)>;

// The UnitInit that fills any rank's slice of any unit from full tensors (padding zero).
model::UnitInit unit_init_from(FullTensorSource source);

}  // namespace strata::weights
