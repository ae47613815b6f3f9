// Counter-based parameter initialisation: every element's initial value is a pure function
// of (seed, tensor, layer, global element index), so a tensor-parallel shard, a pipeline
// stage or a ZeRO-3 partition initialises its slice to exactly the values the single-rank
// model has there, whatever the plan. It deliberately keeps no generator state: there is
// nothing to advance, split or keep in sync between ranks, and a unit's elements are drawn
// on every thread (or on the GPU: kernels/cuda/normal_init.h) with the same bits.
#pragma once

#include <cstdint>
#include <functional>

#include "cost_model/specs/param_layout.h"
#include "kernels/counter_normal.h"

namespace strata::model {

using kernels::splitmix64;

// The stream key of one global tensor: (seed, tensor kind code, layer), mixed.
std::uint64_t tensor_key(std::uint64_t seed, int tensor_code, std::int64_t layer);

// A standard normal draw for element `index` (>= 0) of the tensor with key `key`: the cosine
// or sine half of Box-Muller on the two 53-bit uniforms of its pair index / 2
// (kernels/counter_normal.h).
double normal_at(std::uint64_t key, std::int64_t index);

// A uniform draw in [0, 1) for (key, index), 53 bits.
double uniform_at(std::uint64_t key, std::int64_t index);

// Writes the initial values of the unit's flat elements [begin, end) into dst[0 .. end-begin)
// (elements past unit.count, i.e. ZeRO padding, are zero), on the OpenMP team: the bits do
// not depend on the number of threads.
void init_unit_range(const UnitLayout& unit, std::uint64_t seed, float* dst, std::int64_t begin,
                     std::int64_t end);

// Where a unit's initial values come from: writes elements [begin, end) of the unit's flat
// buffer (padding zero) into dst. SeededInit is one; a weights file another.
using UnitInit = std::function<void(const UnitLayout& unit, float* dst, std::int64_t begin,
                                    std::int64_t end)>;

// Told how many elements have just been initialised (set-up progress; tools/ prints it).
using InitProgress = std::function<void(std::int64_t elements)>;

// The initial values drawn from `seed` (init_unit_range). A type of its own, so that the
// model state can find it inside a UnitInit (std::function::target) and draw the values
// where the parameters live instead (Backend::init_seeded: the same bits).
struct SeededInit {
  std::uint64_t seed = 0;
  InitProgress progress;  // may be empty
  void operator()(const UnitLayout& unit, float* dst, std::int64_t begin, std::int64_t end) const;
};

// `init` (not empty: std::invalid_argument) with `progress` told after each call; a
// SeededInit stays one, for the device path.
UnitInit with_progress(UnitInit init, InitProgress progress);

}  // namespace strata::model
