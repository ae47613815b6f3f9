// Counter-based parameter initialisation: every element's initial value is a pure function
// of (seed, tensor, layer, global element index), so a tensor-parallel shard, a pipeline
// stage or a ZeRO-3 partition initialises its slice to exactly the values the single-rank
// model has there, whatever the plan. It deliberately keeps no generator state: there is
// nothing to advance, split or keep in sync between ranks.
#pragma once

#include <cstdint>
#include <functional>

#include "cost_model/param_layout.h"

namespace strata::model {

// SplitMix64 (Steele, Lea, Flood 2014): a bijective 64-bit mixer, used as a counter-based
// generator: splitmix64(key) for key = 0, 1, 2, ... is a well-distributed sequence.
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The stream key of one global tensor: (seed, tensor kind code, layer), mixed.
std::uint64_t tensor_key(std::uint64_t seed, int tensor_code, std::int64_t layer);

// A standard normal draw for element `index` of the tensor with key `key` (Box-Muller on
// two 53-bit uniforms derived from the counter).
double normal_at(std::uint64_t key, std::int64_t index);

// A uniform draw in [0, 1) for (key, index), 53 bits.
double uniform_at(std::uint64_t key, std::int64_t index);

// Writes the initial values of the unit's flat elements [begin, end) into dst[0 .. end-begin)
// (elements past unit.count, i.e. ZeRO padding, are zero).
void init_unit_range(const UnitLayout& unit, std::uint64_t seed, float* dst, std::int64_t begin,
                     std::int64_t end);

// Where a unit's initial values come from: writes elements [begin, end) of the unit's flat
// buffer (padding zero) into dst. init_unit_range with a seed is one; a weights file another.
using UnitInit = std::function<void(const UnitLayout& unit, float* dst, std::int64_t begin,
                                    std::int64_t end)>;

}  // namespace strata::model
