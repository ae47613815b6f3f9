// SwiGLU, the gated MLP activation of Llama-style decoders (Shazeer 2020, "GLU Variants
// Improve Transformer"): out = silu(gate) * up, silu(a) = a * sigmoid(a), on the CPU in fp32.
//
// Layout contract: ONE input buffer inp: (BT, 2F), each row [gate (F) | up (F)], the output of
// one GEMM whose weight stacks W_gate above W_up. Under tensor parallelism both matrices are
// column-split together (rank r holds rows [r F, (r+1) F) of each, stacked), so each rank's
// local GEMM yields exactly this [gate | up] row with F = ffn_hidden / t, and the activation
// needs no communication and no second GEMM launch. This is Megatron-LM's fused fc1 layout
// (torch.chunk(x, 2, dim=-1)); two separate buffers would cost a second GEMM (or a strided
// view) on every rank for nothing.
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

// out: (BT, F) = silu(inp[:, :F]) * inp[:, F:], overwritten; inp: (BT, 2F).
void swiglu_forward(float* out, const float* inp, std::int64_t BT, std::int64_t F);

// ACCUMULATES: dinp: (BT, 2F) += [dout * up * silu'(gate) | dout * silu(gate)];
// inp: (BT, 2F) the forward's input; dout: (BT, F).
void swiglu_backward(float* dinp, const float* inp, const float* dout, std::int64_t BT,
                     std::int64_t F);

}  // namespace strata::kernels::cpu
