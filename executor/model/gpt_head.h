// The ends of the GPT model on one TP rank: the vocab-parallel token + position embedding
// (first virtual stage) and the head (last virtual stage): final LayerNorm, logits against
// the tied wte shard, vocab-parallel cross-entropy (max and sum-exp all-reduced over TP).
//
// The head runs the loss AND the backward of the logits inside its forward (one
// micro-batch's logits live at a time, as the memory model assumes): it keeps lnf_in (the
// caller's buffer), the LayerNorm statistics and the gradient at the LayerNorm output
// (lnf_dout, the same size as the lnf_out the memory model lists), and its backward only
// runs the final LayerNorm's backward. wte's gradient is accumulated during the forward.
// Deliberately not here: sampling, label smoothing, an untied output layer.
#pragma once

#include <cstdint>

#include "executor/memory/accounting_allocator.h"
#include "executor/model/tp_context.h"

namespace strata::model {

// out: (R, C) = this rank's rows of wte[tokens] + wpe (wpe added on TP rank 0 only, then
// summed over TP: all-reduce, or reduce-scatter with SP). tokens: (B, T); wte: this rank's
// shard (Vshard, C); wpe: (T, C).
void embedding_forward(float* out, const std::int32_t* tokens, const float* wte,
                       const float* wpe, const Dims& d, AccountingAllocator& alloc,
                       TpContext& tp);
// dout: (R, C). ACCUMULATES dwte (shard) and dwpe (replicated: every TP rank gets the same
// gradient; with SP from the all-gathered dout).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                        const Dims& d, AccountingAllocator& alloc, TpContext& tp);

struct HeadActivations {
  Buffer lnf_mean, lnf_rstd;  // (R)
  Buffer lnf_dout;            // (R, C): gradient at the final LayerNorm's output
};

// x: (R, C) = lnf_in; targets: (B, T). Every row's loss gradient is loss_scale (e.g.
// 1 / tokens of the global batch). Returns the SUM of this micro-batch's per-token losses.
// dwte: the tied wte shard's gradient, ACCUMULATED.
double head_forward(const float* x, const std::int32_t* targets, const float* lnf_w,
                    const float* lnf_b, const float* wte, float* dwte, float loss_scale,
                    HeadActivations& acts, const Dims& d, AccountingAllocator& alloc,
                    TpContext& tp);

// dx: (R, C) OVERWRITTEN with the gradient at x; dlnf_w, dlnf_b ACCUMULATED.
void head_backward(const float* x, const float* lnf_w, float* dlnf_w, float* dlnf_b,
                   const HeadActivations& acts, float* dx, const Dims& d);

}  // namespace strata::model
