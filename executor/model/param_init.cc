// Counter-based parameter initialisation (see param_init.h).
#include "executor/model/param_init.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "kernels/cpu/normal_init.h"

namespace strata::model {

std::uint64_t tensor_key(std::uint64_t seed, int tensor_code, std::int64_t layer) {
  std::uint64_t k = splitmix64(seed);
  k = splitmix64(k ^ (static_cast<std::uint64_t>(tensor_code) << 48));
  return splitmix64(k ^ static_cast<std::uint64_t>(layer + 1));
}

double uniform_at(std::uint64_t key, std::int64_t index) {
  return static_cast<double>(kernels::counter_bits(key, static_cast<std::uint64_t>(index)) >> 11) *
         0x1.0p-53;
}

double normal_at(std::uint64_t key, std::int64_t index) {
  return kernels::cpu::normal_exact(key, index);
}

void init_unit_range(const UnitLayout& unit, std::uint64_t seed, float* dst, std::int64_t begin,
                     std::int64_t end) {
  // One team for the whole range; each segment's rows are shared out statically. A row's
  // elements are consecutive global indices (global_index(r, c) = global_index(r, 0) + c), so
  // a row is one normal_fill. The ZeRO padding past the last segment is zero.
  const std::int64_t covered = std::min(end, unit.count);
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (std::int64_t i = std::max(begin, covered); i < end; ++i) dst[i - begin] = 0.0f;
    for (const auto& s : unit.segments) {
      const std::int64_t lo = std::max(begin, s.offset);
      const std::int64_t hi = std::min(end, s.offset + s.count());
      if (lo >= hi) continue;
      const std::uint64_t key = tensor_key(seed, s.code, s.layer);
      const std::int64_t first_row = (lo - s.offset) / s.cols;
      const std::int64_t last_row = (hi - 1 - s.offset) / s.cols;
#pragma omp for schedule(static) nowait
      for (std::int64_t r = first_row; r <= last_row; ++r) {
        const std::int64_t row_begin = std::max(lo, s.offset + r * s.cols);
        const std::int64_t row_end = std::min(hi, s.offset + (r + 1) * s.cols);
        float* out = dst + (row_begin - begin);
        const std::int64_t n = row_end - row_begin;
        if (r >= s.valid_rows || s.init == InitKind::kZeros) {
          std::fill(out, out + n, 0.0f);
        } else if (s.init == InitKind::kOnes) {
          std::fill(out, out + n, 1.0f);
        } else {
          const std::int64_t c = row_begin - (s.offset + r * s.cols);
          kernels::cpu::normal_fill(out, key, s.global_index(r, c), n, s.init_std);
        }
      }
    }
  }
}

void SeededInit::operator()(const UnitLayout& unit, float* dst, std::int64_t begin,
                            std::int64_t end) const {
  init_unit_range(unit, seed, dst, begin, end);
  if (progress) progress(end - begin);
}

UnitInit with_progress(UnitInit init, InitProgress progress) {
  if (!init) throw std::invalid_argument("with_progress: an empty UnitInit (pass SeededInit)");
  if (const auto* seeded = init.target<SeededInit>()) {
    return SeededInit{seeded->seed, std::move(progress)};
  }
  return [init = std::move(init), progress = std::move(progress)](
             const UnitLayout& unit, float* dst, std::int64_t begin, std::int64_t end) {
    init(unit, dst, begin, end);
    progress(end - begin);
  };
}

}  // namespace strata::model
