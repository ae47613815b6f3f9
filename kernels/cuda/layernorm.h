// LayerNorm on the GPU (eps 1e-5, as kernels/cpu/layernorm.h), with the pre-LN transformer's
// residual add fused in: one kernel reads the two residual inputs once, writes their sum (the
// residual stream) and the normalised output. bf16 activations, fp32 statistics and fp32
// parameter gradients; all arithmetic in fp32. Backward's dweight/dbias go through per-block
// partial sums reduced in a fixed order (deterministic, no atomics).
// It deliberately has no RMSNorm variant and no vectorised (128-bit) loads yet.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/common.h"
#include "kernels/cuda/scratch_sizes.h"

namespace strata::kernels::cuda {

// out: (BT, C) = (inp - mean) * rstd * weight + bias, overwritten.
// mean, rstd: (BT) fp32 written; inp: (BT, C); weight, bias: (C).
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp,
                       const bf16* weight, const bf16* bias, int BT, int C,
                       cudaStream_t stream);

// residual: (BT, C) = inp1 + inp2 (rounded to bf16), then out = layernorm(residual) as above
// (statistics of the rounded sum, so backward can recompute from `residual`). residual may
// alias inp1 or inp2 (each element is read before it is written, by the same thread).
void fused_residual_layernorm_forward(bf16* residual, bf16* out, float* mean, float* rstd,
                                      const bf16* inp1, const bf16* inp2, const bf16* weight,
                                      const bf16* bias, int BT, int C, cudaStream_t stream);

// Its scratch: layernorm_backward_scratch_floats (scratch_sizes.h).

// ACCUMULATES: dinp: (BT, C) bf16 +=, dweight: (C) fp32 +=, dbias: (C) fp32 +=.
// For the fused op pass the residual stream's gradient as dinp (the residual add's backward
// is the identity into both inputs) and `residual` as inp.
// dout, inp: (BT, C) bf16; weight: (C) bf16; mean, rstd: (BT) from the forward;
// scratch: layernorm_backward_scratch_floats(BT, C) floats, contents ignored.
void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                        const bf16* inp, const bf16* weight, const float* mean,
                        const float* rstd, int BT, int C, float* scratch, cudaStream_t stream);

}  // namespace strata::kernels::cuda
