// GeLU with the tanh approximation (GPT-2's):
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Elementwise over a flat array; it deliberately has no exact-erf variant.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace strata::kernels::cpu {

// isa: which compiled version runs (isa.h); both give the same bits.
// out: (N) = gelu(inp: (N)), overwritten. out may alias inp.
void gelu_forward(float* out, const float* inp, std::int64_t N, Isa isa = Isa::kBest);

// dinp: (N) += gelu'(inp) * dout; inp, dout: (N). ACCUMULATES.
void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t N,
                   Isa isa = Isa::kBest);

// d: (N) = gelu'(inp) * d, in place: the gradient at gelu's output becomes the one at its
// input without a second buffer. inp: (N).
void gelu_backward_in_place(float* d, const float* inp, std::int64_t N,
                            Isa isa = Isa::kBest);

}  // namespace strata::kernels::cpu
