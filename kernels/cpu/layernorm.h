// LayerNorm over the last dimension, forward and backward, on the CPU (fp32, eps 1e-5).
// Statistics are computed in double for accuracy; it deliberately has no RMSNorm variant.
#pragma once

#include "kernels/cpu/isa.h"

namespace strata::kernels::cpu {

inline constexpr float kLayerNormEps = 1e-5f;

// out: (BT, C) = (inp - mean) * rstd * weight + bias, overwritten.
// mean: (BT), rstd: (BT) written (saved for backward); inp: (BT, C); weight, bias: (C).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int BT, int C,
                       Isa isa = Isa::kBest);

// ACCUMULATES: dinp: (BT, C) +=, dweight: (C) +=, dbias: (C) +=.
// dout, inp: (BT, C); weight: (C); mean, rstd: (BT) from layernorm_forward.
// dweight/dbias are reduced over BT in a fixed order (deterministic for any thread count).
// isa: which compiled version runs (isa.h); they agree to rounding of the row statistics.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int BT, int C, Isa isa = Isa::kBest);

}  // namespace strata::kernels::cpu
