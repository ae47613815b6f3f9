// Causal multi-head self-attention on the GPU that never materialises the (T, T) matrix:
// flash-attention style tiles of keys/values streamed through shared memory with an online
// softmax; forward saves only the per-row log-sum-exp, backward recomputes the
// probabilities from it. Same packed layout and argument order as kernels/cpu/attention.h:
// qkv: (B, T, 3*C), each row [q | k | v], each (NH, HS); scale 1/sqrt(HS); position t sees
// 0..t. bf16 tensors, fp32 arithmetic.
// Compiled for HS = 64 and 128 only (KernelError otherwise; attention_shapes.h's check).
// FlashAttention-2 style on tensor cores: mma.sync m16n8k16 bf16 with fp32 accumulation,
// ldmatrix fragments, cp.async
// double-buffered tiles; runs on sm_80 and sm_90 (no wgmma / TMA). No dropout, no rotary
// embedding. Pointers must be 16-byte aligned (KernelError otherwise).
// Deterministic: no atomics; every output element is owned by one thread and summed in a
// fixed order, so reruns are bit-identical.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/common.h"
#include "kernels/cuda/scratch_sizes.h"

namespace strata::kernels::cuda {

// out: (B, T, C) overwritten; lse: (B, NH, T) fp32 written, lse = log(sum_t2 exp(score)) of
// the scaled scores (the softmax denominator, saved for backward); qkv: (B, T, 3*C).
void attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                       cudaStream_t stream);

// Its scratch: attention_backward_scratch_floats (scratch_sizes.h).

// dqkv: (B, T, 3*C) += gradient (ACCUMULATES into the q, k and v parts), or = gradient with
// overwrite (every element of dqkv is written: no zeroed buffer needed).
// dout, out: (B, T, C) (out from attention_forward); qkv: (B, T, 3*C); lse: (B, NH, T);
// scratch: attention_backward_scratch_floats(B, T, NH) floats, contents ignored.
void attention_backward(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv,
                        const bf16* out, const float* lse, int B, int T, int C, int NH,
                        cudaStream_t stream, bool overwrite = false);

// Grouped-query attention (kernels/cpu/flash_attention.h's KVH overloads, the same layout):
// KVH key/value heads, NH % KVH == 0, query head h reads KV head h / (NH / KVH) in place (no
// copies of K and V). qkv, dqkv: (B, T, C + 2 KVH HS), rows [q (NH) | k (KVH) | v (KVH)];
// out, dout: (B, T, C); lse: (B, NH, T); scratch as above. dK and dV of a KV head sum its
// group's query heads in head order inside one block (no atomics: still bit-reproducible).
// KVH == NH is the overloads above, which call these.
void attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                       int KVH, cudaStream_t stream);
void attention_backward(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv,
                        const bf16* out, const float* lse, int B, int T, int C, int NH, int KVH,
                        cudaStream_t stream, bool overwrite = false);

}  // namespace strata::kernels::cuda
