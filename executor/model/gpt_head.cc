// Embedding and head of the GPT model on one TP rank (see gpt_head.h).
#include "executor/model/gpt_head.h"

#include <utility>
#include <vector>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layernorm.h"

namespace strata::model {
namespace cpu = strata::kernels::cpu;

void embedding_forward(float* out, const std::int32_t* tokens, const float* wte,
                       const float* wpe, const Dims& d, AccountingAllocator& alloc,
                       TpContext& tp) {
  // Positions once: the sum over TP would otherwise count them t times.
  const float* positions = d.tp_rank == 0 ? wpe : nullptr;
  if (!d.sp) {
    cpu::embedding_forward(out, tokens, wte, positions, d.B, d.T, d.C, d.v0, d.v0 + d.Vvalid);
    tp.all_reduce_sum(out, d.act());
    return;
  }
  Buffer partial = alloc.allocate_floats(MemoryTier::kDevice, d.act(), "forward_scratch");
  cpu::embedding_forward(partial.f32(), tokens, wte, positions, d.B, d.T, d.C, d.v0,
                         d.v0 + d.Vvalid);
  tp.reduce_scatter_sum(partial.f32(), out, d.act_local());
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                        const Dims& d, AccountingAllocator& alloc, TpContext& tp) {
  Buffer full;
  if (d.sp) {
    full = alloc.allocate_floats(MemoryTier::kDevice, d.act(), "backward_scratch");
    tp.all_gather(dout, full.f32(), d.act_local());
    dout = full.f32();
  }
  cpu::embedding_backward(dwte, dwpe, dout, tokens, d.B, d.T, d.C, d.v0, d.v0 + d.Vvalid);
}

double head_forward(const float* x, const std::int32_t* targets, const float* lnf_w,
                    const float* lnf_b, const float* wte, float* dwte, float loss_scale,
                    HeadActivations& a, const Dims& d, AccountingAllocator& alloc,
                    TpContext& tp) {
  const int BT = d.BT();
  const int R = d.rows();
  const std::int64_t n = d.act();
  const std::int64_t nl = d.act_local();
  a.lnf_mean = alloc.allocate_floats(MemoryTier::kDevice, R, "act/lnf_mean");
  a.lnf_rstd = alloc.allocate_floats(MemoryTier::kDevice, R, "act/lnf_rstd");
  a.lnf_dout = alloc.allocate_floats(MemoryTier::kDevice, nl, "act/lnf_dout");
  Buffer lnf_out = alloc.allocate_floats(MemoryTier::kDevice, nl, "head_scratch");
  cpu::layernorm_forward(lnf_out.f32(), a.lnf_mean.f32(), a.lnf_rstd.f32(), x, lnf_w, lnf_b, R,
                         d.C);
  if (d.sp) {  // the logits need every token row: gather the LayerNorm output
    Buffer full = alloc.allocate_floats(MemoryTier::kDevice, n, "head_scratch");
    tp.all_gather(lnf_out.f32(), full.f32(), nl);
    lnf_out = std::move(full);
  }
  const std::int64_t nlog = static_cast<std::int64_t>(BT) * d.Vvalid;
  Buffer logits = alloc.allocate_floats(MemoryTier::kDevice, nlog, "logits");
  if (d.Vvalid > 0) {
    cpu::matmul_forward(logits.f32(), lnf_out.f32(), wte, nullptr, BT, d.C, d.Vvalid);
  }
  // Vocab-parallel cross-entropy: global row max, then global sum of exp, then the target's
  // logit (0 on ranks whose shard does not hold it), each all-reduced over TP.
  Buffer stats = alloc.allocate_floats(MemoryTier::kDevice, 5 * static_cast<std::int64_t>(BT),
                                       "head_scratch");
  float* row_max = stats.f32();
  float* row_sum = row_max + BT;
  float* target_logit = row_sum + BT;
  float* losses = target_logit + BT;
  float* row_lse = losses + BT;
  const float lowest = -3.0e38f;
  if (d.Vvalid > 0) {
    cpu::vocab_parallel_row_max(row_max, logits.f32(), BT, d.Vvalid);
  } else {
    for (int i = 0; i < BT; ++i) row_max[i] = lowest;
  }
  tp.all_reduce_max(row_max, BT);
  if (d.Vvalid > 0) {
    cpu::vocab_parallel_sum_exp(row_sum, logits.f32(), row_max, BT, d.Vvalid);
    cpu::vocab_parallel_target_logit(target_logit, logits.f32(), targets, BT, d.Vvalid, d.v0);
  }
  tp.all_reduce_sum(row_sum, 2 * static_cast<std::int64_t>(BT));  // row_sum and target_logit
  cpu::vocab_parallel_loss(losses, row_lse, row_max, row_sum, target_logit, BT);
  double loss_sum = 0;
  for (int i = 0; i < BT; ++i) loss_sum += losses[i];

  // Backward of the logits now, while they are live: dlogits, then the gradient at the
  // LayerNorm output (partial over the vocabulary shard: summed over TP) and wte's gradient.
  Buffer dlogits = alloc.allocate_floats(MemoryTier::kDevice, nlog, "dlogits");
  std::vector<float> dlosses(static_cast<std::size_t>(BT), loss_scale);
  Buffer dout_full;
  float* dout = a.lnf_dout.f32();
  if (d.sp) {
    dout_full = alloc.allocate_floats(MemoryTier::kDevice, n, "head_scratch");
    dout = dout_full.f32();
  }
  if (d.Vvalid > 0) {
    cpu::vocab_parallel_cross_entropy_backward(dlogits.f32(), dlosses.data(), logits.f32(),
                                               row_lse, targets, BT, d.Vvalid, d.v0);
    logits.reset();
    cpu::matmul_backward(dout, dwte, nullptr, dlogits.f32(), lnf_out.f32(), wte, BT, d.C,
                         d.Vvalid);
  }
  if (d.sp) {
    tp.reduce_scatter_sum(dout, a.lnf_dout.f32(), nl);
  } else {
    tp.all_reduce_sum(dout, n);
  }
  return loss_sum;
}

void head_backward(const float* x, const float* lnf_w, float* dlnf_w, float* dlnf_b,
                   const HeadActivations& a, float* dx, const Dims& d) {
  cpu::zero(dx, d.act_local());
  cpu::layernorm_backward(dx, dlnf_w, dlnf_b, a.lnf_dout.f32(), x, lnf_w, a.lnf_mean.f32(),
                          a.lnf_rstd.f32(), d.rows(), d.C);
}

}  // namespace strata::model
