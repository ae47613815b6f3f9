// Fused softmax cross-entropy over logits (BT, V) that never writes normalised logits:
// forward saves per-row max and log-sum-exp, backward recomputes softmax from them.
// Also the vocab-parallel building blocks for tensor parallelism, where each rank holds a
// vocab slice [vocab_start, vocab_start + Vlocal) of the logits: the executor all-reduces
// (max, then sum, then target logit) between these calls. It deliberately does no
// communication, no label smoothing and no ignore-index (every target must be valid).
//
// Loss per row i: loss[i] = lse[i] - logits[i, target[i]], lse = max + log(sum exp(x - max)).
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

// losses: (BT), row_max: (BT), row_lse: (BT) written; logits: (BT, V); targets: (BT) in [0, V).
void cross_entropy_forward(float* losses, float* row_max, float* row_lse, const float* logits,
                           const std::int32_t* targets, int BT, int V);

// dlogits: (BT, V) += (softmax(logits) - onehot(target)) * dlosses[i]   (ACCUMULATES)
// dlosses: (BT), e.g. 1/BT everywhere for a mean loss; logits: (BT, V); row_lse: (BT).
// dlogits must not alias logits.
void cross_entropy_backward(float* dlogits, const float* dlosses, const float* logits,
                            const float* row_lse, const std::int32_t* targets, int BT, int V);

// --- vocab-parallel pieces; logits: (BT, Vlocal) is this rank's slice ---

// local_max: (BT) = max over the slice of each row.      -> all-reduce MAX
void vocab_parallel_row_max(float* local_max, const float* logits, int BT, int Vlocal);

// local_sum: (BT) = sum_j exp(logits[i, j] - global_max[i]).   -> all-reduce SUM
void vocab_parallel_sum_exp(float* local_sum, const float* logits, const float* global_max,
                            int BT, int Vlocal);

// target_logit: (BT) = logits[i, targets[i] - vocab_start] when the target falls in the
// slice, else 0.   -> all-reduce SUM. targets: (BT) global ids (>= 0).
void vocab_parallel_target_logit(float* target_logit, const float* logits,
                                 const std::int32_t* targets, int BT, int Vlocal,
                                 int vocab_start);

// From the reduced statistics: row_lse[i] = global_max[i] + log(global_sum[i]),
// losses[i] = row_lse[i] - target_logit[i]. losses, row_lse: (BT) written.
void vocab_parallel_loss(float* losses, float* row_lse, const float* global_max,
                         const float* global_sum, const float* target_logit, int BT);

// dlogits: (BT, Vlocal) += (exp(logits - row_lse) - onehot) * dlosses[i], onehot where
// vocab_start + j == targets[i]. row_lse: (BT) GLOBAL. ACCUMULATES; no aliasing.
void vocab_parallel_cross_entropy_backward(float* dlogits, const float* dlosses,
                                           const float* logits, const float* row_lse,
                                           const std::int32_t* targets, int BT, int Vlocal,
                                           int vocab_start);

}  // namespace strata::kernels::cpu
