// Slices of full tensors (see full_tensors.h).
#include "executor/weights/full_tensors.h"

#include <utility>

namespace strata::weights {

std::string full_owner(const UnitLayout& unit) {
  return unit.kind == UnitKind::kTiedCopy ? "embedding" : unit.name;
}

model::UnitInit unit_init_from(FullTensorSource source) {
  return [source = std::move(source)](const UnitLayout& unit, float* dst, std::int64_t begin,
                                      std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) dst[i - begin] = 0.0f;  // padding stays zero
    const std::string owner = full_owner(unit);
    // Elements come segment by segment: one source lookup per segment, not per element.
    const ParamSegment* current = nullptr;
    SegmentValues values;
    for_each_full_element(unit, begin, end, [&](const ParamSegment& s, std::int64_t i,
                                                std::int64_t row, std::int64_t col) {
      if (&s != current) {
        current = &s;
        values = source(owner, s);
      }
      dst[i - begin] = values(row, col);
    });
  };
}

}  // namespace strata::weights
