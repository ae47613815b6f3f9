// The ends of the decoder model on one TP rank, written once over LayerOps: the
// vocab-parallel token embedding, plus learned positions when the family has them (first
// virtual stage), and the head (last virtual stage): final norm (LayerNorm or RMSNorm),
// logits against the output layer's shard (the untied lm_head, or the tied wte),
// vocab-parallel cross-entropy (max, sum of exp and target logit summed over TP).
//
// The head runs the loss AND the backward of the logits inside its forward (one
// micro-batch's logits live at a time, as the memory model assumes): it keeps lnf_in (the
// caller's tensor), the norm statistics and the gradient at the norm output (lnf_dout), and
// its backward only runs the final norm's backward. The output layer's gradient is
// accumulated during the forward.
// Deliberately not here: sampling, label smoothing.
#pragma once

#include <cstdint>

#include "executor/engine/tensor.h"
#include "executor/model/layer_ops.h"
#include "executor/model/tp_context.h"

namespace strata::model {

// out: (R, C) = this rank's rows of wte[tokens] + wpe (wpe added on TP rank 0 only, then
// summed over TP: all-reduce, or reduce-scatter with SP). tokens: (B, T) int32 on the
// device; wte: this rank's shard (Vshard, C); wpe: (T, C), null with rotary positions.
void embedding_forward(LayerOps& ops, void* out, const std::int32_t* tokens, const void* wte,
                       const void* wpe, const Dims& d, TpContext& tp);
// dout: (R, C). ACCUMULATES dwte (shard) and dwpe (replicated: every TP rank gets the same
// gradient; with SP from the all-gathered dout; null: none).
void embedding_backward(LayerOps& ops, float* dwte, float* dwpe, const void* dout,
                        const std::int32_t* tokens, const Dims& d, TpContext& tp);

struct HeadActivations {
  engine::Tensor lnf_mean, lnf_rstd;  // (R) fp32; the mean stays empty under RMSNorm
  engine::Tensor lnf_dout;            // (R, C): gradient at the final LayerNorm's output
};

// x: (R, C) = lnf_in; targets: (B, T) int32 on the device; dlosses: (BT) fp32, every
// token's loss gradient (1 / tokens of the global batch). losses: (BT) fp32 OVERWRITTEN with
// this micro-batch's per-token losses. out_w: the output layer's shard (Vshard, C), the
// untied lm_head or the tied wte; dout_w: its gradient, ACCUMULATED. lnf_b: null for RMSNorm.
void head_forward(LayerOps& ops, const void* x, const std::int32_t* targets, const void* lnf_w,
                  const void* lnf_b, const void* out_w, float* dout_w, const float* dlosses,
                  float* losses, HeadActivations& acts, const Dims& d, TpContext& tp);

// dx: (R, C) OVERWRITTEN with the gradient at x; dlnf_w, dlnf_b ACCUMULATED. Frees acts.
void head_backward(LayerOps& ops, const void* x, const void* lnf_w, float* dlnf_w,
                   float* dlnf_b, HeadActivations& acts, void* dx, const Dims& d);

}  // namespace strata::model
