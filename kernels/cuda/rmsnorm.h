// RMSNorm on the GPU (kernels/cpu/rmsnorm.h's formula: y = x / sqrt(mean(x^2) + eps) * weight,
// a gain and no bias, eps the model's), with the pre-norm decoder's residual add fused in as
// layernorm.h does: one kernel reads the two residual inputs once and writes their sum (the
// residual stream) and the normalised output. bf16 activations, fp32 rstd and fp32 weight
// gradient; all arithmetic in fp32. Backward's dweight goes through per-block partial sums
// reduced in a fixed order (deterministic, no atomics).
// It deliberately has no vectorised (128-bit) path yet (layernorm.cu has one).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/common.h"
#include "kernels/cuda/scratch_sizes.h"

namespace strata::kernels::cuda {

// out: (BT, C) = inp * rstd * weight, overwritten; rstd: (BT) fp32 written,
// rstd = 1 / sqrt(mean_c(inp^2) + eps); inp: (BT, C); weight: (C). eps >= 0 (KernelError).
void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* weight, int BT, int C,
                     float eps, cudaStream_t stream);

// residual: (BT, C) = inp1 + inp2 (rounded to bf16), then out = rmsnorm(residual) as above
// (the statistic of the rounded sum, so backward can recompute from `residual`). residual may
// alias inp1 or inp2 (each element is read before it is written, by the same thread); out
// may alias none of them.
void fused_residual_rmsnorm_forward(bf16* residual, bf16* out, float* rstd, const bf16* inp1,
                                    const bf16* inp2, const bf16* weight, int BT, int C,
                                    float eps, cudaStream_t stream);

// Floats of scratch rmsnorm_backward needs: rmsnorm_backward_scratch_floats (scratch_sizes.h,
// which the GPU-less pool recorder reads too).

// ACCUMULATES: dinp: (BT, C) bf16 +=, dweight: (C) fp32 +=.
// For the fused op pass the residual stream's gradient as dinp (the residual add's backward
// is the identity into both inputs) and `residual` as inp.
// dout, inp: (BT, C) bf16; weight: (C) bf16; rstd: (BT) from the forward;
// scratch: rmsnorm_backward_scratch_floats(BT, C) floats, contents ignored.
void rmsnorm_backward(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp,
                      const bf16* weight, const float* rstd, int BT, int C, float* scratch,
                      cudaStream_t stream);

}  // namespace strata::kernels::cuda
