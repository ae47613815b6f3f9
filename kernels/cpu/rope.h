// Rotary position embedding (RoPE, Su et al. 2021) as Llama and Hugging Face apply it, on the
// CPU in fp32, in place. Within each head of HS dims, dim i pairs with dim i + HS/2 (the
// "rotate_half" convention, NOT adjacent interleaved pairs) and the pair is rotated by
//   angle(pos, i) = pos * inv_i,   i in [0, HS/2),
// inv_i = kernels/rope_frequency.h's rope_inverse_frequency (theta^(-2i / HS), or Llama 3.1's
// "llama3" rope_scaling of it):
//   x_i' = x_i cos - x_{i+HS/2} sin,   x_{i+HS/2}' = x_{i+HS/2} cos + x_i sin.
// Backward is the transpose, the rotation by -angle. Angles, cosines and sines are computed
// in double and rounded to float once (positions reach 10^5: an fp32 angle would be off by
// ~10^-2 rad there).
//
// Layout: row (b, t) of x starts at x + (b * T + t) * row_stride and holds `heads` heads of
// HS contiguous floats from its start; the position of row (b, t) is pos_offset + t, so a
// sequence split (sequence parallelism, a context chunk) passes its first token's position.
// For the packed attention input (B, T, [q (NH HS) | k (KVH HS) | v (KVH HS)]) the q and k
// heads are adjacent: one call with heads = NH + KVH and row_stride = (NH + 2 KVH) HS
// rotates both and leaves v alone.
#pragma once

#include <cstdint>

#include "kernels/rope_frequency.h"

namespace strata::kernels::cpu {

// x rotated in place by +angle (the forward).
// Throws KernelError unless B, T, heads > 0, HS > 0 even, row_stride >= heads * HS,
// pos_offset >= 0 and freq is valid (rope_frequencies_violation).
void rope_forward(float* x, int B, int T, int heads, int HS, std::int64_t row_stride,
                  int pos_offset, const RopeFrequencies& freq);

// dx rotated in place by -angle: the gradient at the rotation's output becomes the one at
// its input. Same layout and checks as rope_forward.
void rope_backward(float* dx, int B, int T, int heads, int HS, std::int64_t row_stride,
                   int pos_offset, const RopeFrequencies& freq);

}  // namespace strata::kernels::cpu
