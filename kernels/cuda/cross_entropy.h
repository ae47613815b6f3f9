// Fused softmax cross-entropy on the GPU that never writes normalised logits: forward makes
// one pass per row with an online max/sum-of-exponentials and saves the row max and
// log-sum-exp; backward recomputes softmax from them and writes bf16 dlogits, in place over
// bf16 logits if the caller wants (llm.c's trick: no extra (BT, V) buffer).
// Same shapes and argument order as kernels/cpu/cross_entropy.h, with two deliberate
// differences: backward OVERWRITES dlogits (so it may alias logits) instead of accumulating,
// and targets live on the device, so an out-of-range target cannot throw: its row's loss
// is NaN (and its dlogits row is the plain softmax). No vocab-parallel pieces yet, no label
// smoothing, no ignore-index.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/common.h"

namespace strata::kernels::cuda {

// losses, row_max, row_lse: (BT) fp32 written; logits: (BT, V) bf16 or fp32;
// targets: (BT) int32 in [0, V). loss = lse - logits[target].
// ld: the logits' row stride in elements (0: V). A padded vocabulary (rows of ld > V, so the
// logits matmul gets 16-byte aligned rows) keeps its columns >= V out of the softmax; the
// backward never touches them either.
void cross_entropy_forward(float* losses, float* row_max, float* row_lse, const bf16* logits,
                           const std::int32_t* targets, int BT, int V, cudaStream_t stream,
                           int ld = 0);
void cross_entropy_forward(float* losses, float* row_max, float* row_lse, const float* logits,
                           const std::int32_t* targets, int BT, int V, cudaStream_t stream,
                           int ld = 0);

// dlogits: (BT, V) bf16 = (softmax(logits) - onehot(target)) * dlosses[i]   (OVERWRITES;
// may alias bf16 logits). dlosses: (BT) fp32, e.g. 1/BT everywhere for a mean loss;
// row_lse: (BT) from the forward.
void cross_entropy_backward(bf16* dlogits, const float* dlosses, const bf16* logits,
                            const float* row_lse, const std::int32_t* targets, int BT, int V,
                            cudaStream_t stream, int ld = 0);
void cross_entropy_backward(bf16* dlogits, const float* dlosses, const float* logits,
                            const float* row_lse, const std::int32_t* targets, int BT, int V,
                            cudaStream_t stream, int ld = 0);

// Both in one pass, for the training step: losses, row_max and row_lse as the forward writes
// them, and logits OVERWRITTEN by their gradient (softmax - onehot(target)) * dlosses[i],
// columns >= V untouched. Reads the logits once instead of twice: one block per row keeps
// the row in registers (rows up to 65536 columns, 16-byte aligned, ld % 8 == 0); other rows
// take the forward and backward kernels above, with the same results to rounding.
void cross_entropy_forward_backward(float* losses, float* row_max, float* row_lse,
                                    bf16* logits, const float* dlosses,
                                    const std::int32_t* targets, int BT, int V,
                                    cudaStream_t stream, int ld = 0);

}  // namespace strata::kernels::cuda
