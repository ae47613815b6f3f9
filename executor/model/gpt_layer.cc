// A transformer layer's forward and backward on one TP rank (see gpt_layer.h).
#include "executor/model/gpt_layer.h"

#include <string>

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
                        d.NHl);
}

}  // namespace

void layer_forward(LayerOps& ops, const LayerWeights& w, const void* x, void* y,
                   LayerActivations& a, const Dims& d, TpContext& tp) {
  const int BT = d.BT();
  const int R = d.rows();
  const std::int64_t nl = d.act_local();
  const bool split = d.t > 1;  // row-parallel biases are added after the TP sum
  a.ln1_mean = stat(ops, R, "ln1_mean");
  a.ln1_rstd = stat(ops, R, "ln1_rstd");
  a.ln1_out = act(ops, nl, "ln1_out");
  ops.layernorm_forward(a.ln1_out.data(), a.ln1_mean.f32(), a.ln1_rstd.f32(), x, w.ln1_w,
                        w.ln1_b, R, d.C);
  a.qkv = act(ops, static_cast<std::int64_t>(BT) * 3 * d.Cl, "qkv");
  {
    Tensor held;
    const void* in = gather_rows(ops, a.ln1_out.data(), held, d, tp, kForwardScratch);
    ops.matmul_forward(a.qkv.data(), in, w.qkv_w, w.qkv_b, BT, d.C, 3 * d.Cl);
  }
  attention_core_forward(ops, a, d);
  // Row-parallel projection: partial sums over the rank's heads, summed over TP, bias once.
  {
    Tensor proj = ops.activations(d.act(), kForwardScratch);
    ops.matmul_forward(proj.data(), a.attn_out.data(), w.proj_w, split ? nullptr : w.proj_b, BT,
                       d.Cl, d.C);
    proj = complete_rows(ops, std::move(proj), d, tp, kForwardScratch);
    a.ln2_in = act(ops, nl, "ln2_in");
    a.ln2_mean = stat(ops, R, "ln2_mean");
    a.ln2_rstd = stat(ops, R, "ln2_rstd");
    a.ln2_out = act(ops, nl, "ln2_out");
    ops.residual_layernorm_forward(a.ln2_in.data(), a.ln2_out.data(), a.ln2_mean.f32(),
                                   a.ln2_rstd.f32(), x, proj.data(), split ? w.proj_b : nullptr,
                                   w.ln2_w, w.ln2_b, R, d.C);
  }
  const std::int64_t nf = static_cast<std::int64_t>(BT) * d.Fl;
  a.fc1_out = act(ops, nf, "fc1_out");
  a.gelu_out = act(ops, nf, "gelu_out");
  {
    Tensor held;
    const void* in = gather_rows(ops, a.ln2_out.data(), held, d, tp, kForwardScratch);
    ops.matmul_gelu_forward(a.gelu_out.data(), a.fc1_out.data(), in, w.fc_w, w.fc_b, BT, d.C,
                            d.Fl);
  }
  if (y == nullptr) return;  // recomputation: the output is already known
  if (!split) {
    ops.matmul_residual_forward(y, a.gelu_out.data(), w.fc2_w, w.fc2_b, a.ln2_in.data(), BT,
                                d.Fl, d.C);
    return;
  }
  Tensor partial = ops.activations(d.act(), kForwardScratch);
  ops.matmul_forward(partial.data(), a.gelu_out.data(), w.fc2_w, nullptr, BT, d.Fl, d.C);
  const Tensor whole = complete_rows(ops, std::move(partial), d, tp, kForwardScratch);
  ops.bias_residual(y, whole.data(), w.fc2_b, a.ln2_in.data(), R, d.C);
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
  const std::int64_t nf = static_cast<std::int64_t>(BT) * d.Fl;
  // The input gradient of a column-parallel linear, computed as (BT, C) partial sums over
  // TP into `full`, made complete on this rank's rows (all-reduce, or with SP
  // reduce-scatter), then its LayerNorm's backward accumulated into dres.
  const auto norm_backward = [&](Tensor full, float* dw, float* db, const void* inp,
                                 const void* gain, const Tensor& mean, const Tensor& rstd) {
    const Tensor rows = complete_rows(ops, std::move(full), d, tp, kBackwardScratch);
    ops.layernorm_backward(dres, dw, db, rows.data(), inp, gain, mean.f32(), rstd.f32(), R, d.C);
  };
  {
    // MLP: dres holds dy. The replicated fc2 bias gets the same gradient on every TP rank
    // (from the full dy).
    Tensor dfc1 = ops.activations(nf, kBackwardScratch);
    {
      Tensor held;
      const void* dy_full = gather_rows(ops, dres, held, d, tp, kBackwardScratch);
      ops.matmul_gelu_backward(dfc1.data(), g.fc2_w, g.fc2_b, dy_full, a.gelu_out.data(),
                               w.fc2_w, a.fc1_out.data(), BT, d.Fl, d.C);
    }
    a.gelu_out.reset();
    a.fc1_out.reset();
    Tensor dln2 = ops.activations(n, kBackwardScratch);
    {
      Tensor held;
      const void* in = gather_rows(ops, a.ln2_out.data(), held, d, tp, kBackwardScratch);
      ops.matmul_backward(dln2.data(), g.fc_w, g.fc_b, dfc1.data(), in, w.fc_w, BT, d.C, d.Fl);
    }
    dfc1.reset();
    a.ln2_out.reset();
    norm_backward(std::move(dln2), g.ln2_w, g.ln2_b, a.ln2_in.data(), w.ln2_w, a.ln2_mean,
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
      ops.matmul_backward(dattn.data(), g.proj_w, g.proj_b, dr_full, a.attn_out.data(),
                          w.proj_w, BT, d.Cl, d.C);
    }
    Tensor dqkv = ops.activations(static_cast<std::int64_t>(BT) * 3 * d.Cl, kBackwardScratch);
    ops.attention_backward(dqkv.data(), dattn.data(), a.qkv.data(), a.attn_out.data(),
                           a.attn_stats.f32(), d.B, d.T, d.Cl, d.NHl);
    dattn.reset();
    a.attn_out.reset();
    a.attn_stats.reset();
    Tensor dln1 = ops.activations(n, kBackwardScratch);
    {
      Tensor held;
      const void* in = gather_rows(ops, a.ln1_out.data(), held, d, tp, kBackwardScratch);
      ops.matmul_backward(dln1.data(), g.qkv_w, g.qkv_b, dqkv.data(), in, w.qkv_w, BT, d.C,
                          3 * d.Cl);
    }
    dqkv.reset();
    a.qkv.reset();
    a.ln1_out.reset();
    norm_backward(std::move(dln1), g.ln1_w, g.ln1_b, x, w.ln1_w, a.ln1_mean, a.ln1_rstd);
  }
  a = {};
}

}  // namespace strata::model
