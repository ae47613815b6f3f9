// Multi-tensor AdamW on the GPU: one kernel launch updates a whole list of parameter tensors
// (fp32 master weights, fp32 grads and moments, each with or without weight decay) and writes
// each parameter's bf16 compute copy in the same pass, so the optimizer state is read and
// written once per step: the engine gives it every tensor of a rank at once (Backend::adamw).
// The update is the CPU's (kernels/cpu/adamw.h, same AdamWParams and formula, decoupled
// weight decay, bias correction), with the clipping scale folded into the gradient's read.
// Each operation is rounded as the CPU twin rounds it (no FMA contraction, IEEE division and
// square root), so the fp32 results are the CPU twin's bits. Also the deterministic sum of
// squares behind the global gradient norm.
// It deliberately does no communication (the caller all-reduces the sums of squares) and
// keeps no state between steps beyond the tensors it is given.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/cpu/adamw.h"
#include "kernels/cuda/adamw_tiles.h"
#include "kernels/cuda/common.h"

namespace strata::kernels::cuda {

using AdamWParams = cpu::AdamWParams;

// One parameter tensor of n elements; every pointer addresses n elements on the device.
struct AdamWTensor {
  float* param = nullptr;       // fp32 master weights, updated in place
  const float* grad = nullptr;  // fp32 gradient (read, never written)
  float* m = nullptr;           // first moment, updated in place
  float* v = nullptr;           // second moment, updated in place
  bf16* param_bf16 = nullptr;   // bf16 copy written after the update; null: not written
  std::int64_t n = 0;           // >= 0
  bool decayed = true;          // weight decay hp.weight_decay applies (else 0: biases, norms)
};

// For each tensor and element, with g = grad * grad_scale, t = step (1-based) and
// wd = decayed ? hp.weight_decay : 0:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  mhat = m / (1 - b1^t);
//   vhat = v / (1 - b2^t);  p -= lr (mhat / (sqrt(vhat) + eps) + wd p);  p16 = bf16(p)
// grad_scale = cpu::clip_scale(norm, max_norm) for clipping, 1 otherwise. One launch per
// kAdamWTensorsPerLaunch non-empty tensors. Throws KernelError (before any launch) on a null
// pointer, n < 0, step < 1, betas outside [0, 1), eps <= 0, grad_scale not finite and > 0.
void adamw_update(const std::vector<AdamWTensor>& tensors, const AdamWParams& hp, int step,
                  float grad_scale, cudaStream_t stream);

using AdamWStepValues = cpu::AdamWStepValues;

// The same update with grad_scale, lr and the bias corrections read from `values` (device
// memory) when the kernel runs, hp's lr ignored: the form a CUDA graph replays step after
// step while the host rewrites the values (executor/engine/engine.h, "Captured steps"). Its
// CPU twin is adamw_update with the same values. Throws KernelError (before any launch) as
// adamw_update, and on a null `values`; the values themselves are not checked.
void adamw_update_from_device(const std::vector<AdamWTensor>& tensors, const AdamWParams& hp,
                              const AdamWStepValues* values, cudaStream_t stream);

// A captured step's gradient norm and clip factor, with no host wait. sum_of_squares_groups:
// *sum = the sum over the groups of each group's sum of squares (each summed from 0 over its
// spans in order by sum_of_squares, then added in order: the host's per-unit sums, the same
// bits); scratch: 1 + kSumOfSquaresScratchDoubles doubles. clip_scale_from_sum: *grad_scale =
// cpu::clip_scale(sqrt(*sum), max_norm) (1 when max_norm <= 0), its CPU twin's bits (IEEE
// double square root and division, one rounding to float). Between the two a caller with
// several ranks sums *sum over them.
struct SquaredSpan {
  const float* x = nullptr;
  std::int64_t n = 0;
};
void sum_of_squares_groups(double* sum, const std::vector<std::vector<SquaredSpan>>& groups,
                           double* scratch, cudaStream_t stream);
void clip_scale_from_sum(float* grad_scale, const double* sum, float max_norm,
                         cudaStream_t stream);

// Kernel launches adamw_update makes for `tensors` (0 when every tensor is empty).
int adamw_launches(const std::vector<AdamWTensor>& tensors);

// Doubles of scratch sum_of_squares needs (one partial per block of the first pass).
inline constexpr int kSumOfSquaresScratchDoubles = 256;

// *result (one double on the device) += sum of x[i]^2 over (n), accumulated in double with
// a fixed block count and fixed reduction order: bit-identical on every run. Calling it
// once per tensor in a fixed order gives a deterministic global sum.
void sum_of_squares(double* result, double* scratch, const float* x, std::int64_t n,
                    cudaStream_t stream);

}  // namespace strata::kernels::cuda
