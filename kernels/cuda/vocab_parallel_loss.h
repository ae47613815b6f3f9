// Vocab-parallel cross-entropy on bf16 logits (Megatron's, for tensor parallelism): each TP
// rank holds the logits of its vocabulary shard, columns [0, Vlocal) of rows with stride ld
// standing for vocabulary ids [v0, v0 + Vlocal). The row statistics are computed per shard,
// summed (or max-ed) over the TP group by the caller between the launches, then the loss and
// its gradient. CPU twins: kernels/cpu/cross_entropy.h (same names, same shapes).
// Each launcher checks its arguments (KernelError before any launch) and runs on `stream`.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/common.h"

namespace strata::kernels::cuda {

// local_max: (BT) = max over the row's Vlocal columns (-3e38 when Vlocal == 0).
void vocab_parallel_row_max(float* local_max, const bf16* logits, int BT, int Vlocal, int ld,
                            cudaStream_t stream);
// local_sum: (BT) = sum over the row's columns of exp(logit - global_max[row]).
void vocab_parallel_sum_exp(float* local_sum, const bf16* logits, const float* global_max,
                            int BT, int Vlocal, int ld, cudaStream_t stream);
// target_logit: (BT) = the target's logit when v0 <= target < v0 + Vlocal, else 0 (so the
// sum over TP is the target's logit).
void vocab_parallel_target_logit(float* target_logit, const bf16* logits,
                                 const std::int32_t* targets, int BT, int Vlocal, int ld, int v0,
                                 cudaStream_t stream);
// From the reduced statistics: row_lse = global_max + log(global_sum); losses = row_lse -
// target_logit. (BT) each, written.
void vocab_parallel_loss(float* losses, float* row_lse, const float* global_max,
                         const float* global_sum, const float* target_logit, int BT,
                         cudaStream_t stream);
// logits: (BT, ld) OVERWRITTEN in its first Vlocal columns with their gradient
// (exp(logit - row_lse) - onehot(target - v0)) * dlosses[row] (the other columns untouched).
void vocab_parallel_cross_entropy_backward(bf16* logits, const float* dlosses,
                                           const float* row_lse, const std::int32_t* targets,
                                           int BT, int Vlocal, int ld, int v0,
                                           cudaStream_t stream);

// out: (rows, cols) += bias: (cols), bf16 with the sum in fp32 (the row-parallel bias added
// after its TP sum). CPU twin: kernels/cpu/elementwise.h add_bias.
void add_bias(bf16* out, const bf16* bias, int rows, int cols, cudaStream_t stream);

}  // namespace strata::kernels::cuda
