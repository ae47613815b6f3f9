// A decoder layer's forward and backward on one TP rank (see gpt_layer.h).
#include "executor/model/gpt_layer.h"

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace strata::model {
namespace {

constexpr const char* kForwardScratch = "forward_scratch";
constexpr const char* kBackwardScratch = "backward_scratch";

Tensor act(LayerOps& ops, std::int64_t n, const char* name) {
  return ops.activations(n, std::string("act/") + name);
}
Tensor stat(LayerOps& ops, std::int64_t n, const char* name) {
  return ops.floats(n, std::string("act/") + name);
}

// The full (BT, C) version of a row-sharded (R, C) tensor: with SP all-gathered into
// `holder`, else the tensor itself.
const void* gather_rows(LayerOps& ops, const void* local, Tensor& holder, const Dims& d,
                        TpContext& tp, const char* tag) {
  if (!d.sp) return local;
  holder = ops.activations(d.act(), tag);
  tp.all_gather(local, holder.data(), d.act_local());
  return holder.data();
}

// A (BT, C) partial sum over TP (a row-parallel GEMM's output) made complete on this rank's
// rows: returned as `whole` (R, C). Without SP the sum is all-reduced in place; with SP it
// is reduce-scattered into a new (R, C) tensor.
Tensor complete_rows(LayerOps& ops, Tensor partial, const Dims& d, TpContext& tp,
                     const char* tag) {
  if (!d.sp) {
    tp.all_reduce_sum(partial.data(), d.act());
    return partial;
  }
  Tensor rows = ops.activations(d.act_local(), tag);
  tp.reduce_scatter_sum(partial.data(), rows.data(), d.act_local());
  return rows;
}

void attention_core_forward(LayerOps& ops, LayerActivations& a, const Dims& d) {
  a.attn_stats = stat(ops, ops.attention_stats_floats(d.B, d.T, d.NHl), ops.attention_stats_name());
  a.attn_out = act(ops, static_cast<std::int64_t>(d.BT()) * d.Cl, "attn_out");
  ops.attention_forward(a.attn_out.data(), a.attn_stats.f32(), a.qkv.data(), d.B, d.T, d.Cl,
                        d.NHl, d.KVHl);
}

bool rms(const Dims& d) { return d.norm == NormKind::kRmsNorm; }

// A norm's saved statistics under `prefix` ("ln1", "ln2"): LayerNorm's mean and rstd, or
// RMSNorm's rstd (the mean stays empty), then its output.
void norm_forward(LayerOps& ops, const Dims& d, const char* prefix, Tensor& mean, Tensor& rstd,
                  Tensor& out, const void* x, const void* w, const void* b) {
  const int R = d.rows();
  const std::string p(prefix);
  if (!rms(d)) mean = stat(ops, R, (p + "_mean").c_str());
  rstd = stat(ops, R, (p + "_rstd").c_str());
  out = act(ops, d.act_local(), (p + "_out").c_str());
  if (rms(d)) {
    ops.rmsnorm_forward(out.data(), rstd.f32(), x, w, R, d.C, d.norm_eps);
  } else {
    ops.layernorm_forward(out.data(), mean.f32(), rstd.f32(), x, w, b, R, d.C);
  }
}

// The q and k heads of the packed (BT, qkv_width) rows rotated in place (rotary positions
// only); backward the gradient at them rotated back.
void rope(LayerOps& ops, void* qkv, const Dims& d, bool forward) {
  if (d.position != PositionKind::kRope) return;
  if (forward) {
    ops.rope_forward(qkv, d.B, d.T, d.NHl + d.KVHl, d.HS, d.qkv_width(), d.rope);
  } else {
    ops.rope_backward(qkv, d.B, d.T, d.NHl + d.KVHl, d.HS, d.qkv_width(), d.rope);
  }
}

}  // namespace

void check_qkv_adjacent(const UnitLayout& layer) {
  const ParamSegment* q = nullptr;
  const ParamSegment* kv = nullptr;
  for (const ParamSegment& s : layer.segments) {
    if (s.code == kQW) q = &s;
    if (s.code == kKvW) kv = &s;
  }
  if (q == nullptr || kv == nullptr) return;  // GPT's fused qkv_w
  if (kv->offset != q->offset + q->count()) {
    throw std::invalid_argument(fmt::format(
        "{}: q_w and kv_w are not adjacent in the layer's buffer (a q bias between them): "
        "grouped-query attention with biases is not run yet",
        layer.name));
  }
}

void layer_forward(LayerOps& ops, const LayerWeights& w, const void* x, void* y,
                   LayerActivations& a, const Dims& d, TpContext& tp) {
  const int BT = d.BT();
  const int R = d.rows();
  const std::int64_t nl = d.act_local();
  const bool split = d.t > 1;  // row-parallel biases are added after the TP sum
  norm_forward(ops, d, "ln1", a.ln1_mean, a.ln1_rstd, a.ln1_out, x, w[kLn1W], w[kLn1B]);
  a.qkv = act(ops, static_cast<std::int64_t>(BT) * d.qkv_width(), "qkv");
  {
    Tensor held;
    const void* in = gather_rows(ops, a.ln1_out.data(), held, d, tp, kForwardScratch);
    ops.matmul_forward(a.qkv.data(), in, w.qkv_weight(), w.qkv_bias(), BT, d.C, d.qkv_width());
  }
  rope(ops, a.qkv.data(), d, /*forward=*/true);
  attention_core_forward(ops, a, d);
  // Row-parallel projection: partial sums over the rank's heads, summed over TP, bias once.
  {
    Tensor proj = ops.activations(d.act(), kForwardScratch);
    ops.matmul_forward(proj.data(), a.attn_out.data(), w[kProjW], split ? nullptr : w[kProjB],
                       BT, d.Cl, d.C);
    proj = complete_rows(ops, std::move(proj), d, tp, kForwardScratch);
    const void* bias = split ? w[kProjB] : nullptr;
    a.ln2_in = act(ops, nl, "ln2_in");
    if (rms(d)) {
      a.ln2_rstd = stat(ops, R, "ln2_rstd");
      a.ln2_out = act(ops, nl, "ln2_out");
      ops.residual_rmsnorm_forward(a.ln2_in.data(), a.ln2_out.data(), a.ln2_rstd.f32(), x,
                                   proj.data(), bias, w[kLn2W], R, d.C, d.norm_eps);
    } else {
      a.ln2_mean = stat(ops, R, "ln2_mean");
      a.ln2_rstd = stat(ops, R, "ln2_rstd");
      a.ln2_out = act(ops, nl, "ln2_out");
      ops.residual_layernorm_forward(a.ln2_in.data(), a.ln2_out.data(), a.ln2_mean.f32(),
                                     a.ln2_rstd.f32(), x, proj.data(), bias, w[kLn2W], w[kLn2B],
                                     R, d.C);
    }
  }
  a.fc1_out = act(ops, static_cast<std::int64_t>(BT) * d.fc1_width(), "fc1_out");
  a.gelu_out = act(ops, static_cast<std::int64_t>(BT) * d.Fl, "gelu_out");
  {
    Tensor held;
    const void* in = gather_rows(ops, a.ln2_out.data(), held, d, tp, kForwardScratch);
    if (d.mlp == MlpKind::kSwiglu) {
      ops.matmul_forward(a.fc1_out.data(), in, w[kFcW], w[kFcB], BT, d.C, d.fc1_width());
      ops.swiglu_forward(a.gelu_out.data(), a.fc1_out.data(), BT, d.Fl);
    } else {
      ops.matmul_gelu_forward(a.gelu_out.data(), a.fc1_out.data(), in, w[kFcW], w[kFcB], BT,
                              d.C, d.Fl);
    }
  }
  if (y == nullptr) return;  // recomputation: the output is already known
  if (!split) {
    ops.matmul_residual_forward(y, a.gelu_out.data(), w[kFc2W], w[kFc2B], a.ln2_in.data(), BT,
                                d.Fl, d.C);
    return;
  }
  Tensor partial = ops.activations(d.act(), kForwardScratch);
  ops.matmul_forward(partial.data(), a.gelu_out.data(), w[kFc2W], nullptr, BT, d.Fl, d.C);
  const Tensor whole = complete_rows(ops, std::move(partial), d, tp, kForwardScratch);
  ops.bias_residual(y, whole.data(), w[kFc2B], a.ln2_in.data(), R, d.C);
}

void drop_activations(LayerActivations& a, Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone: return;
    case Recompute::kSelective:
      a.attn_stats.reset();
      a.attn_out.reset();
      return;
    case Recompute::kFull: a = {}; return;
  }
}

void recompute_activations(LayerOps& ops, const LayerWeights& w, const void* x,
                           LayerActivations& a, Recompute recompute, const Dims& d,
                           TpContext& tp) {
  switch (recompute) {
    case Recompute::kNone: return;
    case Recompute::kSelective: attention_core_forward(ops, a, d); return;
    case Recompute::kFull: layer_forward(ops, w, x, nullptr, a, d, tp); return;
  }
}

void layer_backward(LayerOps& ops, const LayerWeights& w, const LayerGrads& g, const void* x,
                    LayerActivations& a, void* dres, const Dims& d, TpContext& tp) {
  const int BT = d.BT();
  const int R = d.rows();
  const std::int64_t n = d.act();
  const std::int64_t nf = static_cast<std::int64_t>(BT) * d.fc1_width();
  // The input gradient of a column-parallel linear, computed as (BT, C) partial sums over
  // TP into `full`, made complete on this rank's rows (all-reduce, or with SP
  // reduce-scatter), then its norm's backward accumulated into dres.
  const auto norm_backward = [&](Tensor full, float* dw, float* db, const void* inp,
                                 const void* gain, const Tensor& mean, const Tensor& rstd) {
    const Tensor rows = complete_rows(ops, std::move(full), d, tp, kBackwardScratch);
    if (rms(d)) {
      ops.rmsnorm_backward(dres, dw, rows.data(), inp, gain, rstd.f32(), R, d.C);
    } else {
      ops.layernorm_backward(dres, dw, db, rows.data(), inp, gain, mean.f32(), rstd.f32(), R,
                             d.C);
    }
  };
  {
    // MLP: dres holds dy. The replicated fc2 bias gets the same gradient on every TP rank
    // (from the full dy).
    Tensor dfc1 = ops.activations(nf, kBackwardScratch);
    {
      Tensor held;
      const void* dy_full = gather_rows(ops, dres, held, d, tp, kBackwardScratch);
      if (d.mlp == MlpKind::kSwiglu) {
        ops.matmul_swiglu_backward(dfc1.data(), g[kFc2W], g[kFc2B], dy_full, a.gelu_out.data(),
                                   w[kFc2W], a.fc1_out.data(), BT, d.Fl, d.C);
      } else {
        ops.matmul_gelu_backward(dfc1.data(), g[kFc2W], g[kFc2B], dy_full, a.gelu_out.data(),
                                 w[kFc2W], a.fc1_out.data(), BT, d.Fl, d.C);
      }
    }
    a.gelu_out.reset();
    a.fc1_out.reset();
    Tensor dln2 = ops.activations(n, kBackwardScratch);
    {
      Tensor held;
      const void* in = gather_rows(ops, a.ln2_out.data(), held, d, tp, kBackwardScratch);
      ops.matmul_backward(dln2.data(), g[kFcW], g[kFcB], dfc1.data(), in, w[kFcW], BT, d.C,
                          d.fc1_width());
    }
    dfc1.reset();
    a.ln2_out.reset();
    norm_backward(std::move(dln2), g[kLn2W], g[kLn2B], a.ln2_in.data(), w[kLn2W], a.ln2_mean,
                  a.ln2_rstd);
  }
  a.ln2_in.reset();
  a.ln2_mean.reset();
  a.ln2_rstd.reset();
  {
    // Attention: dres now holds d(r).
    Tensor dattn = ops.activations(static_cast<std::int64_t>(BT) * d.Cl, kBackwardScratch);
    {
      Tensor held;
      const void* dr_full = gather_rows(ops, dres, held, d, tp, kBackwardScratch);
      ops.matmul_backward(dattn.data(), g[kProjW], g[kProjB], dr_full, a.attn_out.data(),
                          w[kProjW], BT, d.Cl, d.C);
    }
    Tensor dqkv = ops.activations(static_cast<std::int64_t>(BT) * d.qkv_width(), kBackwardScratch);
    ops.attention_backward(dqkv.data(), dattn.data(), a.qkv.data(), a.attn_out.data(),
                           a.attn_stats.f32(), d.B, d.T, d.Cl, d.NHl, d.KVHl);
    rope(ops, dqkv.data(), d, /*forward=*/false);
    dattn.reset();
    a.attn_out.reset();
    a.attn_stats.reset();
    Tensor dln1 = ops.activations(n, kBackwardScratch);
    {
      Tensor held;
      const void* in = gather_rows(ops, a.ln1_out.data(), held, d, tp, kBackwardScratch);
      ops.matmul_backward(dln1.data(), g.qkv_weight(), g.qkv_bias(), dqkv.data(), in,
                          w.qkv_weight(), BT, d.C, d.qkv_width());
    }
    dqkv.reset();
    a.qkv.reset();
    a.ln1_out.reset();
    norm_backward(std::move(dln1), g[kLn1W], g[kLn1B], x, w[kLn1W], a.ln1_mean, a.ln1_rstd);
  }
  a = {};
}

}  // namespace strata::model
