// A transformer layer's forward and backward on one TP rank (see gpt_layer.h).
#include "executor/model/gpt_layer.h"

#include <string>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layernorm.h"

namespace strata::model {
namespace cpu = strata::kernels::cpu;

namespace {
Buffer act(AccountingAllocator& alloc, std::int64_t floats, const char* name) {
  return alloc.allocate_floats(MemoryTier::kDevice, floats, std::string("act/") + name);
}
Buffer scratch(AccountingAllocator& alloc, std::int64_t floats, const char* tag) {
  return alloc.allocate_floats(MemoryTier::kDevice, floats, tag);
}
constexpr const char* kForwardScratch = "forward_scratch";
constexpr const char* kBackwardScratch = "backward_scratch";

// The full (BT, C) version of a row-sharded (R, C) tensor: with SP all-gathered into
// `holder`, else the tensor itself.
const float* gather_rows(const float* local, Buffer& holder, const Dims& d,
                         AccountingAllocator& alloc, TpContext& tp, const char* tag) {
  if (!d.sp) return local;
  holder = scratch(alloc, d.act(), tag);
  tp.all_gather(local, holder.f32(), d.act_local());
  return holder.f32();
}

// A (BT, C) partial sum over TP (the output of a row-parallel GEMM) made complete on this
// rank's rows: out (R, C). Without SP the product is computed in out and all-reduced; with
// SP into a temporary and reduce-scattered. gemm(dst) writes the partial product to dst.
template <class Gemm>
void row_parallel_output(float* out, Gemm&& gemm, const Dims& d, AccountingAllocator& alloc,
                         TpContext& tp, const char* tag) {
  if (!d.sp) {
    gemm(out);
    tp.all_reduce_sum(out, d.act());
    return;
  }
  Buffer partial = scratch(alloc, d.act(), tag);
  gemm(partial.f32());
  tp.reduce_scatter_sum(partial.f32(), out, d.act_local());
}

// The gradient at the input of a column-parallel linear: a (BT, C) partial sum over TP in
// `full`, made complete on this rank's rows. Without SP all-reduced in place (returned);
// with SP reduce-scattered into `holder` (returned).
float* column_parallel_input_grad(Buffer& full, Buffer& holder, const Dims& d,
                                  AccountingAllocator& alloc, TpContext& tp) {
  if (!d.sp) {
    tp.all_reduce_sum(full.f32(), d.act());
    return full.f32();
  }
  holder = scratch(alloc, d.act_local(), kBackwardScratch);
  tp.reduce_scatter_sum(full.f32(), holder.f32(), d.act_local());
  full.reset();
  return holder.f32();
}

void attention_core_forward(LayerActivations& a, const Dims& d, AccountingAllocator& alloc) {
  a.attn_probs = act(alloc, static_cast<std::int64_t>(d.B) * d.NHl * d.T * d.T, "attn_probs");
  a.attn_out = act(alloc, static_cast<std::int64_t>(d.BT()) * d.Cl, "attn_out");
  cpu::attention_forward(a.attn_out.f32(), a.attn_probs.f32(), a.qkv.f32(), d.B, d.T, d.Cl,
                         d.NHl);
}
}  // namespace

void add_bias(float* out, const float* bias, int rows, int cols) {
#pragma omp parallel for
  for (int r = 0; r < rows; ++r) {
    float* row = out + static_cast<std::int64_t>(r) * cols;
    for (int c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

void layer_forward(const LayerTensors<const float*>& w, const float* x, float* y,
                   LayerActivations& a, const Dims& d, AccountingAllocator& alloc,
                   TpContext& tp) {
  const int BT = d.BT();
  const int R = d.rows();
  const std::int64_t nl = d.act_local();
  a.ln1_mean = act(alloc, R, "ln1_mean");
  a.ln1_rstd = act(alloc, R, "ln1_rstd");
  a.ln1_out = act(alloc, nl, "ln1_out");
  cpu::layernorm_forward(a.ln1_out.f32(), a.ln1_mean.f32(), a.ln1_rstd.f32(), x, w.ln1_w,
                         w.ln1_b, R, d.C);
  a.qkv = act(alloc, static_cast<std::int64_t>(BT) * 3 * d.Cl, "qkv");
  {
    Buffer held;
    const float* in = gather_rows(a.ln1_out.f32(), held, d, alloc, tp, kForwardScratch);
    cpu::matmul_forward(a.qkv.f32(), in, w.qkv_w, w.qkv_b, BT, d.C, 3 * d.Cl);
  }
  attention_core_forward(a, d, alloc);
  // Row-parallel projection: partial sums over the rank's heads, summed over TP, bias once.
  a.ln2_in = act(alloc, nl, "ln2_in");
  float* r = a.ln2_in.f32();
  row_parallel_output(
      r, [&](float* dst) { cpu::matmul_forward(dst, a.attn_out.f32(), w.proj_w, nullptr, BT, d.Cl, d.C); },
      d, alloc, tp, kForwardScratch);
  add_bias(r, w.proj_b, R, d.C);
  cpu::residual_forward(r, r, x, nl);
  a.ln2_mean = act(alloc, R, "ln2_mean");
  a.ln2_rstd = act(alloc, R, "ln2_rstd");
  a.ln2_out = act(alloc, nl, "ln2_out");
  cpu::layernorm_forward(a.ln2_out.f32(), a.ln2_mean.f32(), a.ln2_rstd.f32(), r, w.ln2_w,
                         w.ln2_b, R, d.C);
  const std::int64_t nf = static_cast<std::int64_t>(BT) * d.Fl;
  a.fc1_out = act(alloc, nf, "fc1_out");
  {
    Buffer held;
    const float* in = gather_rows(a.ln2_out.f32(), held, d, alloc, tp, kForwardScratch);
    cpu::matmul_forward(a.fc1_out.f32(), in, w.fc_w, w.fc_b, BT, d.C, d.Fl);
  }
  a.gelu_out = act(alloc, nf, "gelu_out");
  cpu::gelu_forward(a.gelu_out.f32(), a.fc1_out.f32(), nf);
  if (y == nullptr) return;  // recomputation: the output is already known
  row_parallel_output(
      y, [&](float* dst) { cpu::matmul_forward(dst, a.gelu_out.f32(), w.fc2_w, nullptr, BT, d.Fl, d.C); },
      d, alloc, tp, kForwardScratch);
  add_bias(y, w.fc2_b, R, d.C);
  cpu::residual_forward(y, y, r, nl);
}

void drop_activations(LayerActivations& a, Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone: return;
    case Recompute::kSelective:
      a.attn_probs.reset();
      a.attn_out.reset();
      return;
    case Recompute::kFull: a = {}; return;
  }
}

void recompute_activations(const LayerTensors<const float*>& w, const float* x,
                           LayerActivations& a, Recompute recompute, const Dims& d,
                           AccountingAllocator& alloc, TpContext& tp) {
  switch (recompute) {
    case Recompute::kNone: return;
    case Recompute::kSelective: attention_core_forward(a, d, alloc); return;
    case Recompute::kFull: layer_forward(w, x, nullptr, a, d, alloc, tp); return;
  }
}

void layer_backward(const LayerTensors<const float*>& w, const LayerTensors<float*>& g,
                    const float* x, const LayerActivations& a, const float* dy, float* dx,
                    const Dims& d, AccountingAllocator& alloc, TpContext& tp) {
  const int BT = d.BT();
  const int R = d.rows();
  const std::int64_t n = d.act();
  const std::int64_t nl = d.act_local();
  const std::int64_t nf = static_cast<std::int64_t>(BT) * d.Fl;
  // MLP: dr starts as the residual path's dy.
  Buffer dr = scratch(alloc, nl, kBackwardScratch);
  cpu::copy(dr.f32(), dy, nl);
  {
    Buffer dgelu = scratch(alloc, nf, kBackwardScratch);
    {
      // The replicated fc2 bias gets the same gradient on every TP rank (the full dy).
      Buffer held;
      const float* dy_full = gather_rows(dy, held, d, alloc, tp, kBackwardScratch);
      cpu::matmul_backward(dgelu.f32(), g.fc2_w, g.fc2_b, dy_full, a.gelu_out.f32(), w.fc2_w,
                           BT, d.Fl, d.C);
    }
    Buffer dfc1 = scratch(alloc, nf, kBackwardScratch);
    cpu::gelu_backward(dfc1.f32(), a.fc1_out.f32(), dgelu.f32(), nf);
    dgelu.reset();
    Buffer dln2_full = scratch(alloc, n, kBackwardScratch);
    {
      Buffer held;
      const float* in = gather_rows(a.ln2_out.f32(), held, d, alloc, tp, kBackwardScratch);
      cpu::matmul_backward(dln2_full.f32(), g.fc_w, g.fc_b, dfc1.f32(), in, w.fc_w, BT, d.C,
                           d.Fl);
    }
    dfc1.reset();
    Buffer dln2_rows;
    const float* dln2 = column_parallel_input_grad(dln2_full, dln2_rows, d, alloc, tp);
    cpu::layernorm_backward(dr.f32(), g.ln2_w, g.ln2_b, dln2, a.ln2_in.f32(), w.ln2_w,
                            a.ln2_mean.f32(), a.ln2_rstd.f32(), R, d.C);
  }
  // Attention: dx starts as the residual path's dr.
  cpu::copy(dx, dr.f32(), nl);
  {
    Buffer dattn = scratch(alloc, static_cast<std::int64_t>(BT) * d.Cl, kBackwardScratch);
    {
      Buffer held;
      const float* dr_full = gather_rows(dr.f32(), held, d, alloc, tp, kBackwardScratch);
      cpu::matmul_backward(dattn.f32(), g.proj_w, g.proj_b, dr_full, a.attn_out.f32(),
                           w.proj_w, BT, d.Cl, d.C);
    }
    dr.reset();
    Buffer dqkv = scratch(alloc, static_cast<std::int64_t>(BT) * 3 * d.Cl, kBackwardScratch);
    Buffer att_scratch = scratch(alloc, cpu::attention_backward_scratch_floats(d.B, d.T, d.NHl),
                                 kBackwardScratch);
    cpu::attention_backward(dqkv.f32(), att_scratch.f32(), dattn.f32(), a.qkv.f32(),
                            a.attn_probs.f32(), d.B, d.T, d.Cl, d.NHl);
    att_scratch.reset();
    dattn.reset();
    Buffer dln1_full = scratch(alloc, n, kBackwardScratch);
    {
      Buffer held;
      const float* in = gather_rows(a.ln1_out.f32(), held, d, alloc, tp, kBackwardScratch);
      cpu::matmul_backward(dln1_full.f32(), g.qkv_w, g.qkv_b, dqkv.f32(), in, w.qkv_w, BT, d.C,
                           3 * d.Cl);
    }
    dqkv.reset();
    Buffer dln1_rows;
    const float* dln1 = column_parallel_input_grad(dln1_full, dln1_rows, d, alloc, tp);
    cpu::layernorm_backward(dx, g.ln1_w, g.ln1_b, dln1, x, w.ln1_w, a.ln1_mean.f32(),
                            a.ln1_rstd.f32(), R, d.C);
  }
}

}  // namespace strata::model
