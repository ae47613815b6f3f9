// AdamW (decoupled weight decay, bias-corrected) on fp32 parameters and state, plus the
// sum-of-squares helper behind gradient global-norm clipping. OpenMP across cores with a
// vectorised inner loop; every element's update depends only on that element, so results
// are bit-identical for any thread count or tiling. It deliberately does no mixed precision
// and no communication (the caller all-reduces sums of squares across ranks).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/dtype.h"

namespace strata::kernels::cpu {

struct AdamWParams {
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

// For each i in [0, n), with t = step (1-based):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   mhat = m / (1 - b1^t);  vhat = v / (1 - b2^t)
//   p -= lr (mhat / (sqrt(vhat) + eps) + wd p)
// param, m, v: (n) updated in place; grad: (n). Throws KernelError when step < 1.
void adamw_update(float* param, const float* grad, float* m, float* v, std::int64_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int step);
void adamw_update(float* param, const float* grad, float* m, float* v, std::int64_t n,
                  const AdamWParams& hp, int step);

// The same update on the elements [begin, end) of arrays whose pointers address element 0
// (the offload path streams optimizer state through in tiles). Applying it over tiles that
// cover [0, n) gives bit-identical results to adamw_update over [0, n). isa: which compiled
// version runs (isa.h: baseline, AVX2, AVX-512); all give the same bits. param_bf16 (null:
// none), also addressing element 0: the updated parameters rounded to bf16 (float_to_bf16,
// kernels/bf16.h), written in the same pass (the device's compute copy).
void adamw_update_range(float* param, const float* grad, float* m, float* v,
                        std::int64_t begin, std::int64_t end, const AdamWParams& hp, int step,
                        Isa isa = Isa::kBest, Bf16Bits* param_bf16 = nullptr);

// Sum of x[i]^2 over (n), accumulated in double in fixed-size blocks of fixed lanes added in
// a fixed order: deterministic for any thread count, and the same bits from either compiled
// version (isa). Global norm = sqrt(sum over tensors and ranks).
double sum_of_squares(const float* x, std::int64_t n, Isa isa = Isa::kBest);

// The values of one AdamW step that change from step to step, in the form a captured step
// (CUDA graphs) reads from memory when its update runs, not from its launch's arguments:
// kernels/cuda/adamw.h's adamw_update_from_device reads these four floats.
struct AdamWStepValues {
  float grad_scale = 1;        // the clip factor (clip_scale), 1 without clipping
  float lr = 0;
  float bias_correction1 = 1;  // adamw_bias_correction(beta1, step)
  float bias_correction2 = 1;  // adamw_bias_correction(beta2, step)
};

// Bias correction 1 - beta^step, as every AdamW of strata rounds it (pow in double, rounded
// once to float): the CPU kernels, the CUDA launcher and a captured step's device scalars.
// Inline: the CUDA kernels' library uses it without linking the CPU kernels.
inline float adamw_bias_correction(float beta, int step) {
  return 1.0f - static_cast<float>(std::pow(static_cast<double>(beta), step));
}

// Clip factor for global-norm clipping: min(1, max_norm / (norm + 1e-6)); 1 when
// max_norm <= 0 (clipping off).
float clip_scale(double global_norm, float max_norm);

}  // namespace strata::kernels::cpu
