// Rotary position embedding on the GPU, in place on bf16 rows: kernels/cpu/rope.h's formula,
// pairing (rotate_half: dim i with dim i + HS/2) and layout (row (b, t) at
// x + (b T + t) row_stride holding `heads` heads of HS from its start, position
// pos_offset + t; one call with heads = NH + KVH rotates the q and k parts of a packed qkv
// row). As on the CPU each angle, cosine and sine is computed in double and rounded to fp32
// once; the rotation is fp32 and its result rounded to bf16.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/common.h"
#include "kernels/rope_frequency.h"

namespace strata::kernels::cuda {

// x rotated in place by +angle, the angles' frequencies rope_frequency.h's (the CPU kernel's
// function, on the device). Throws KernelError unless B, T, heads > 0, HS > 0 even,
// row_stride >= heads * HS, pos_offset >= 0 and freq is valid (rope_frequencies_violation).
void rope_forward(bf16* x, int B, int T, int heads, int HS, std::int64_t row_stride,
                  int pos_offset, const RopeFrequencies& freq, cudaStream_t stream);

// dx rotated in place by -angle (the gradient at the rotation's input). Same checks.
void rope_backward(bf16* dx, int B, int T, int heads, int HS, std::int64_t row_stride,
                   int pos_offset, const RopeFrequencies& freq, cudaStream_t stream);

}  // namespace strata::kernels::cuda
