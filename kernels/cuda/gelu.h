// GeLU (tanh approximation, kernels/cpu/gelu.h's formula) on bf16 activations, fp32 math.
// It deliberately has no exact-erf variant; the forward GeLU of the MLP is usually fused
// into the fc matmul's epilogue (gemm.h), and this standalone pair serves the backward and
// unfused paths.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/common.h"

namespace strata::kernels::cuda {

// out: (N) = gelu(inp: (N)), overwritten. out may alias inp.
void gelu_forward(bf16* out, const bf16* inp, std::int64_t N, cudaStream_t stream);

// dinp: (N) += gelu'(inp) * dout (ACCUMULATES, rounded to bf16); inp, dout: (N).
// accumulate = false OVERWRITES instead (dinp = gelu'(inp) * dout): the training step's
// use, in place over dout, which saves a zeroed buffer and a pass over it.
// dinp may alias dout (each element read, then written, by one thread).
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, std::int64_t N,
                   cudaStream_t stream, bool accumulate = true);

}  // namespace strata::kernels::cuda
