// Token (+ optional position) embedding, forward and backward, vocab-parallel aware: a rank
// holds rows [vocab_start, vocab_end) of wte, tokens outside contribute zero, and the caller
// all-reduces the output over the tensor-parallel group. It deliberately does no
// communication. The tied output layer (logits = h @ wte^T) is matmul_forward with a null
// bias (gemm.h), not a kernel of its own.
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

// out: (B, T, C) = wte[tokens - vocab_start] (zero row when out of slice) + wpe[t] (only
// when wpe is non-null; under TP pass wpe on one rank only, else the all-reduce counts it
// t times). Overwrites out. tokens: (B, T) int32 >= 0; wte: (vocab_end - vocab_start, C);
// wpe: (T, C) or null (its first T rows are used).
void embedding_forward(float* out, const std::int32_t* tokens, const float* wte,
                       const float* wpe, int B, int T, int C, int vocab_start, int vocab_end);

// ACCUMULATES: dwte: (vocab_end - vocab_start, C) += dout rows of in-slice tokens (null:
// skipped); dwpe: (T, C) += sum over B of dout (null: skipped). dout: (B, T, C).
// Parallel over columns of C, each thread summing rows in token order: deterministic.
void embedding_backward(float* dwte, float* dwpe, const float* dout,
                        const std::int32_t* tokens, int B, int T, int C, int vocab_start,
                        int vocab_end);

}  // namespace strata::kernels::cpu
