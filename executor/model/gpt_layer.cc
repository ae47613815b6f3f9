// A transformer layer's forward and backward on one TP rank (see gpt_layer.h).
#include "executor/model/gpt_layer.h"

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
Buffer scratch(AccountingAllocator& alloc, std::int64_t floats) {
  return alloc.allocate_floats(MemoryTier::kDevice, floats, "backward_scratch");
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
  const std::int64_t n = d.act();
  a.ln1_mean = act(alloc, BT, "ln1_mean");
  a.ln1_rstd = act(alloc, BT, "ln1_rstd");
  a.ln1_out = act(alloc, n, "ln1_out");
  cpu::layernorm_forward(a.ln1_out.f32(), a.ln1_mean.f32(), a.ln1_rstd.f32(), x, w.ln1_w,
                         w.ln1_b, BT, d.C);
  a.qkv = act(alloc, static_cast<std::int64_t>(BT) * 3 * d.Cl, "qkv");
  cpu::matmul_forward(a.qkv.f32(), a.ln1_out.f32(), w.qkv_w, w.qkv_b, BT, d.C, 3 * d.Cl);
  a.attn_probs = act(alloc, static_cast<std::int64_t>(d.B) * d.NHl * d.T * d.T, "attn_probs");
  a.attn_out = act(alloc, static_cast<std::int64_t>(BT) * d.Cl, "attn_out");
  cpu::attention_forward(a.attn_out.f32(), a.attn_probs.f32(), a.qkv.f32(), d.B, d.T, d.Cl,
                         d.NHl);
  // Row-parallel projection: partial sums over the rank's heads, all-reduced, bias once.
  a.ln2_in = act(alloc, n, "ln2_in");
  float* r = a.ln2_in.f32();
  cpu::matmul_forward(r, a.attn_out.f32(), w.proj_w, nullptr, BT, d.Cl, d.C);
  tp.all_reduce_sum(r, n);
  add_bias(r, w.proj_b, BT, d.C);
  cpu::residual_forward(r, r, x, n);
  a.ln2_mean = act(alloc, BT, "ln2_mean");
  a.ln2_rstd = act(alloc, BT, "ln2_rstd");
  a.ln2_out = act(alloc, n, "ln2_out");
  cpu::layernorm_forward(a.ln2_out.f32(), a.ln2_mean.f32(), a.ln2_rstd.f32(), r, w.ln2_w,
                         w.ln2_b, BT, d.C);
  const std::int64_t nf = static_cast<std::int64_t>(BT) * d.Fl;
  a.fc1_out = act(alloc, nf, "fc1_out");
  cpu::matmul_forward(a.fc1_out.f32(), a.ln2_out.f32(), w.fc_w, w.fc_b, BT, d.C, d.Fl);
  a.gelu_out = act(alloc, nf, "gelu_out");
  cpu::gelu_forward(a.gelu_out.f32(), a.fc1_out.f32(), nf);
  cpu::matmul_forward(y, a.gelu_out.f32(), w.fc2_w, nullptr, BT, d.Fl, d.C);
  tp.all_reduce_sum(y, n);
  add_bias(y, w.fc2_b, BT, d.C);
  cpu::residual_forward(y, y, r, n);
}

void layer_backward(const LayerTensors<const float*>& w, const LayerTensors<float*>& g,
                    const float* x, const LayerActivations& a, const float* dy, float* dx,
                    const Dims& d, AccountingAllocator& alloc, TpContext& tp) {
  const int BT = d.BT();
  const std::int64_t n = d.act();
  const std::int64_t nf = static_cast<std::int64_t>(BT) * d.Fl;
  // MLP: dr starts as the residual path's dy.
  Buffer dr = scratch(alloc, n);
  cpu::copy(dr.f32(), dy, n);
  {
    Buffer dgelu = scratch(alloc, nf);
    // The replicated fc2 bias gets the same gradient on every TP rank (dy is replicated).
    cpu::matmul_backward(dgelu.f32(), g.fc2_w, g.fc2_b, dy, a.gelu_out.f32(), w.fc2_w, BT,
                         d.Fl, d.C);
    Buffer dfc1 = scratch(alloc, nf);
    cpu::gelu_backward(dfc1.f32(), a.fc1_out.f32(), dgelu.f32(), nf);
    dgelu.reset();
    Buffer dln2 = scratch(alloc, n);
    cpu::matmul_backward(dln2.f32(), g.fc_w, g.fc_b, dfc1.f32(), a.ln2_out.f32(), w.fc_w, BT,
                         d.C, d.Fl);
    dfc1.reset();
    tp.all_reduce_sum(dln2.f32(), n);  // column-parallel fc1: sum the input gradient over TP
    cpu::layernorm_backward(dr.f32(), g.ln2_w, g.ln2_b, dln2.f32(), a.ln2_in.f32(), w.ln2_w,
                            a.ln2_mean.f32(), a.ln2_rstd.f32(), BT, d.C);
  }
  // Attention: dx starts as the residual path's dr.
  cpu::copy(dx, dr.f32(), n);
  {
    Buffer dattn = scratch(alloc, static_cast<std::int64_t>(BT) * d.Cl);
    cpu::matmul_backward(dattn.f32(), g.proj_w, g.proj_b, dr.f32(), a.attn_out.f32(), w.proj_w,
                         BT, d.Cl, d.C);
    dr.reset();
    Buffer dqkv = scratch(alloc, static_cast<std::int64_t>(BT) * 3 * d.Cl);
    Buffer att_scratch = scratch(alloc, cpu::attention_backward_scratch_floats(d.B, d.T, d.NHl));
    cpu::attention_backward(dqkv.f32(), att_scratch.f32(), dattn.f32(), a.qkv.f32(),
                            a.attn_probs.f32(), d.B, d.T, d.Cl, d.NHl);
    att_scratch.reset();
    dattn.reset();
    Buffer dln1 = scratch(alloc, n);
    cpu::matmul_backward(dln1.f32(), g.qkv_w, g.qkv_b, dqkv.f32(), a.ln1_out.f32(), w.qkv_w, BT,
                         d.C, 3 * d.Cl);
    dqkv.reset();
    tp.all_reduce_sum(dln1.f32(), n);  // column-parallel qkv
    cpu::layernorm_backward(dx, g.ln1_w, g.ln1_b, dln1.f32(), x, w.ln1_w, a.ln1_mean.f32(),
                            a.ln1_rstd.f32(), BT, d.C);
  }
}

}  // namespace strata::model
