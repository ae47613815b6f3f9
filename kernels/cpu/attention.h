// Causal multi-head self-attention on a packed qkv tensor, forward and backward, on the CPU,
// with the (T, T) probabilities materialised: the plain reference that the CPU backend's
// tiled kernels (flash_attention.h) and the CUDA kernels are tested against, kept simple on
// purpose (one row at a time, libm's exp). No dropout, no rotary embedding.
//
// Layout: qkv: (B, T, 3*C) with each row [q | k | v], each of C = NH * HS laid out as
// (NH, HS). C and NH are the LOCAL sizes under tensor parallelism (heads / t).
// Scale 1/sqrt(HS); position t attends to positions 0..t.
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

// out: (B, T, C) overwritten; probs: (B, NH, T, T) overwritten (softmax rows; entries above
// the diagonal are 0); qkv: (B, T, 3*C). Throws KernelError unless NH divides C.
void attention_forward(float* out, float* probs, const float* qkv, int B, int T, int C,
                       int NH);

// Floats of scratch attention_backward needs: B * NH * T.
std::int64_t attention_backward_scratch_floats(int B, int T, int NH);

// dqkv: (B, T, 3*C) += gradient (ACCUMULATES into the q, k and v parts);
// scratch: at least attention_backward_scratch_floats(B, T, NH) floats, contents ignored;
// dout: (B, T, C); qkv: (B, T, 3*C); probs: (B, NH, T, T) from attention_forward.
// Parallel over (b, h) pairs, each owning its own slice of dqkv: deterministic.
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* probs, int B, int T, int C, int NH);

}  // namespace strata::kernels::cpu
