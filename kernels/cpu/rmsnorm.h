// RMSNorm over the last dimension (Llama's norm: a gain, no bias, no mean subtraction),
// forward and backward, on the CPU in fp32:
//   y = x / sqrt(mean_c(x^2) + eps) * weight.
// The row statistic is summed in double for accuracy. epsilon is the model's (Llama 3 uses
// 1e-5, Llama 2 1e-6), so it is a parameter rather than a constant as in layernorm.h.
#pragma once

namespace strata::kernels::cpu {

// out: (BT, C) = inp * rstd * weight, overwritten; rstd: (BT) written (saved for backward),
// rstd = 1 / sqrt(mean_c(inp^2) + eps); inp: (BT, C); weight: (C). out may alias inp.
// Throws KernelError unless eps >= 0 (a negative eps could take the root of a negative).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int BT,
                     int C, float eps);

// ACCUMULATES: dinp: (BT, C) +=, dweight: (C) +=.
// dout, inp: (BT, C); weight: (C); rstd: (BT) from rmsnorm_forward.
// dweight is reduced over BT in a fixed order (deterministic for any thread count).
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int BT, int C);

}  // namespace strata::kernels::cpu
