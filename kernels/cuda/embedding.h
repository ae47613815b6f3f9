// Token (+ optional position) embedding on the GPU, forward and backward, vocab-parallel
// aware like kernels/cpu/embedding.h (same shapes and argument order): a rank holds rows
// [vocab_start, vocab_end) of wte, out-of-slice tokens contribute zero. bf16 tables and
// activations; fp32 gradients.
// Determinism: backward uses no atomics. dwte rows are partitioned over blocks (row r
// belongs to block r % blocks); each block walks the tokens in position order and adds the
// rows it owns, so every dwte element receives its terms in position order, exactly the
// CPU twin's order: with the same bf16 dout, the fp32 results are bit-identical to it.
// dwpe: one thread per (t, c) adds over b in order (again the CPU's order).
// It deliberately does no communication and no bounds errors for tokens (they live on the
// device): tokens < 0 or outside the slice simply contribute nothing.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/common.h"

namespace strata::kernels::cuda {

// out: (B, T, C) = wte[tokens - vocab_start] (zero row when out of slice) + wpe[t] (only
// when wpe is non-null), overwritten. tokens: (B, T) int32; wte: (vocab_end - vocab_start,
// C); wpe: (T, C) or null.
void embedding_forward(bf16* out, const std::int32_t* tokens, const bf16* wte,
                       const bf16* wpe, int B, int T, int C, int vocab_start, int vocab_end,
                       cudaStream_t stream);

// ACCUMULATES: dwte: (vocab_end - vocab_start, C) fp32 += dout rows of in-slice tokens
// (null: skipped); dwpe: (T, C) fp32 += sum over B of dout (null: skipped). dout: (B, T, C).
void embedding_backward(float* dwte, float* dwpe, const bf16* dout,
                        const std::int32_t* tokens, int B, int T, int C, int vocab_start,
                        int vocab_end, cudaStream_t stream);

}  // namespace strata::kernels::cuda
