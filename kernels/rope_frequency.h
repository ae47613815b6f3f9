// RoPE's inverse frequencies, the one place they are computed: the CPU kernel
// (kernels/cpu/rope.h) and the CUDA kernel (kernels/cuda/rope.h) both call
// rope_inverse_frequency, in double, for pair i of a head of HS dims. The angle of pair i at
// position p is p * rope_inverse_frequency(f, i, HS).
//
// Unscaled (factor == 1): RoFormer's inv_i = theta^(-2i / HS) (Su et al. 2021, eq. 15).
// Scaled: Llama 3.1's rope_scaling, transformers' rope_type "llama3"
// (modeling_rope_utils._compute_llama3_parameters), which stretches the long wavelengths by
// `factor` and leaves the short ones, with a linear blend between:
//   wavelen         = 2 pi / inv_i
//   high_wavelen    = original_max_positions / high_freq_factor
//   low_wavelen     = original_max_positions / low_freq_factor
//   wavelen <  high_wavelen:  inv_i                      (fast pairs: untouched)
//   wavelen >  low_wavelen:   inv_i / factor             (slow pairs: interpolated)
//   otherwise:                (1 - s) inv_i / factor + s inv_i,
//                             s = (original_max_positions / wavelen - low_freq_factor)
//                                 / (high_freq_factor - low_freq_factor)
// transformers computes inv_i in fp32; here it is double, as every RoPE angle in strata is
// (positions reach 10^5), and tools/check_against_pytorch.py follows this.
#pragma once

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "kernels/host_device.h"

namespace strata::kernels {

struct RopeFrequencies {
  double theta = 10000.0;
  // Llama 3.1's published values except factor, which is 1 (no scaling) unless a model's
  // rope_scaling says otherwise (cost_model/specs/model_spec.h: RopeScaling).
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_positions = 8192.0;
};

STRATA_HOST_DEVICE double rope_inverse_frequency(const RopeFrequencies& f, int i, int HS) {
  const double inv = pow(f.theta, -2.0 * i / HS);
  // factor 1 is the identity in every branch below, but the blend would round differently:
  // unscaled RoPE keeps exactly the frequencies (and goldens) it had before scaling existed.
  if (f.factor == 1.0) return inv;
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  const double wavelen = kTwoPi / inv;
  if (wavelen < f.original_max_positions / f.high_freq_factor) return inv;
  if (wavelen > f.original_max_positions / f.low_freq_factor) return inv / f.factor;
  const double smooth = (f.original_max_positions / wavelen - f.low_freq_factor) /
                        (f.high_freq_factor - f.low_freq_factor);
  return (1.0 - smooth) * inv / f.factor + smooth * inv;
}

// "" when f describes frequencies (theta > 0; factor >= 1; 0 < low_freq_factor <
// high_freq_factor; original_max_positions > 0), else what is wrong, for a kernel's message.
// The model config is checked with the same bounds on load (ModelSpec::from_json).
inline std::string rope_frequencies_violation(const RopeFrequencies& f) {
  if (!(f.theta > 0.0)) return fmt::format("theta = {}; expected > 0", f.theta);
  if (!(f.factor >= 1.0)) return fmt::format("factor = {}; expected >= 1", f.factor);
  if (!(f.low_freq_factor > 0.0 && f.low_freq_factor < f.high_freq_factor)) {
    return fmt::format("low_freq_factor = {}, high_freq_factor = {}; expected 0 < low < high",
                       f.low_freq_factor, f.high_freq_factor);
  }
  if (!(f.original_max_positions > 0.0)) {
    return fmt::format("original_max_positions = {}; expected > 0", f.original_max_positions);
  }
  return "";
}

}  // namespace strata::kernels
