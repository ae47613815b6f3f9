// SwiGLU (kernels/cpu/swiglu.h's formula and layout: out = silu(gate) * up, one input buffer
// whose rows are [gate (F) | up (F)], the output of the GEMM that stacks W_gate above W_up;
// the layout a tensor-parallel column split of both matrices gives each rank, see there) on
// bf16 activations, fp32 math.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/common.h"

namespace strata::kernels::cuda {

// out: (BT, F) = silu(inp[:, :F]) * inp[:, F:], overwritten; inp: (BT, 2F).
void swiglu_forward(bf16* out, const bf16* inp, std::int64_t BT, std::int64_t F,
                    cudaStream_t stream);

// dinp: (BT, 2F) += [dout * up * silu'(gate) | dout * silu(gate)] (ACCUMULATES, rounded to
// bf16); inp: (BT, 2F) the forward's input; dout: (BT, F).
// accumulate = false OVERWRITES instead; then dinp may alias inp (each thread reads its gate
// and up elements before it writes their gradients), saving a buffer.
void swiglu_backward(bf16* dinp, const bf16* inp, const bf16* dout, std::int64_t BT,
                     std::int64_t F, cudaStream_t stream, bool accumulate = true);

}  // namespace strata::kernels::cuda
