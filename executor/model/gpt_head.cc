// Embedding and head of the decoder model on one TP rank (see gpt_head.h).
#include "executor/model/gpt_head.h"

#include <utility>

namespace strata::model {

using engine::Tensor;

void embedding_forward(LayerOps& ops, void* out, const std::int32_t* tokens, const void* wte,
                       const void* wpe, const Dims& d, TpContext& tp) {
  // Positions once: the sum over TP would otherwise count them t times.
  const void* positions = d.tp_rank == 0 ? wpe : nullptr;
  if (!d.sp) {
    ops.embedding_forward(out, tokens, wte, positions, d.B, d.T, d.C, d.v0, d.v0 + d.Vvalid);
    tp.all_reduce_sum(out, d.act());
    return;
  }
  Tensor partial = ops.activations(d.act(), "forward_scratch");
  ops.embedding_forward(partial.data(), tokens, wte, positions, d.B, d.T, d.C, d.v0,
                        d.v0 + d.Vvalid);
  tp.reduce_scatter_sum(partial.data(), out, d.act_local());
}

void embedding_backward(LayerOps& ops, float* dwte, float* dwpe, const void* dout,
                        const std::int32_t* tokens, const Dims& d, TpContext& tp) {
  Tensor full;
  if (d.sp) {
    full = ops.activations(d.act(), "backward_scratch");
    tp.all_gather(dout, full.data(), d.act_local());
    dout = full.data();
  }
  ops.embedding_backward(dwte, dwpe, dout, tokens, d.B, d.T, d.C, d.v0, d.v0 + d.Vvalid);
}

void head_forward(LayerOps& ops, const void* x, const std::int32_t* targets, const void* lnf_w,
                  const void* lnf_b, const void* out_w, float* dout_w, const float* dlosses,
                  float* losses, HeadActivations& a, const Dims& d, TpContext& tp) {
  const int BT = d.BT();
  const int R = d.rows();
  const std::int64_t n = d.act();
  const std::int64_t nl = d.act_local();
  const bool rms = d.norm == NormKind::kRmsNorm;  // RMSNorm keeps no mean
  if (!rms) a.lnf_mean = ops.floats(R, "act/lnf_mean");
  a.lnf_rstd = ops.floats(R, "act/lnf_rstd");
  a.lnf_dout = ops.activations(nl, "act/lnf_dout");
  Tensor lnf_out = ops.activations(nl, "head_scratch");
  if (rms) {
    ops.rmsnorm_forward(lnf_out.data(), a.lnf_rstd.f32(), x, lnf_w, R, d.C, d.norm_eps);
  } else {
    ops.layernorm_forward(lnf_out.data(), a.lnf_mean.f32(), a.lnf_rstd.f32(), x, lnf_w, lnf_b,
                          R, d.C);
  }
  if (d.sp) {  // the logits need every token row: gather the LayerNorm output
    Tensor full = ops.activations(n, "head_scratch");
    tp.all_gather(lnf_out.data(), full.data(), nl);
    lnf_out = std::move(full);
  }
  // The logits GEMM covers the shard's real rows (CPU) or all of its aligned rows (CUDA:
  // the padding rows are zero, their logits ignored by the loss).
  const int width = ops.logits_width(d.Vvalid, d.Vshard);
  Tensor logits = ops.activations(static_cast<std::int64_t>(BT) * width, "logits");
  if (width > 0) ops.matmul_forward(logits.data(), lnf_out.data(), out_w, nullptr, BT, d.C, width);
  ops.cross_entropy_forward_backward(losses, logits, dlosses, targets, BT, d.Vvalid, width, d.v0,
                                     tp);
  // The gradient at the LayerNorm output: partial over the vocabulary shard, summed over TP.
  Tensor dout_full;
  void* dout = a.lnf_dout.data();
  if (d.sp) {
    dout_full = ops.activations(n, "head_scratch");
    dout = dout_full.data();
  }
  if (width > 0) {
    ops.matmul_backward(dout, dout_w, nullptr, logits.data(), lnf_out.data(), out_w, BT, d.C,
                        width);
  } else {
    ops.zero(dout, n);
  }
  logits.reset();
  if (d.sp) {
    tp.reduce_scatter_sum(dout, a.lnf_dout.data(), nl);
  } else {
    tp.all_reduce_sum(dout, n);
  }
}

void head_backward(LayerOps& ops, const void* x, const void* lnf_w, float* dlnf_w,
                   float* dlnf_b, HeadActivations& a, void* dx, const Dims& d) {
  ops.zero(dx, d.act_local());
  if (d.norm == NormKind::kRmsNorm) {
    ops.rmsnorm_backward(dx, dlnf_w, a.lnf_dout.data(), x, lnf_w, a.lnf_rstd.f32(), d.rows(),
                         d.C);
  } else {
    ops.layernorm_backward(dx, dlnf_w, dlnf_b, a.lnf_dout.data(), x, lnf_w, a.lnf_mean.f32(),
                           a.lnf_rstd.f32(), d.rows(), d.C);
  }
  a = {};
}

}  // namespace strata::model
