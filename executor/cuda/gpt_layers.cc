#include "executor/cuda/gpt_layers.h"

#include "executor/cuda/system_error.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/layernorm.h"

namespace strata::cuda {
namespace kc = kernels::cuda;

namespace {
constexpr std::int64_t kBf16 = sizeof(bf16);
constexpr std::int64_t kF32 = sizeof(float);
}  // namespace

GptKernels::GptKernels(const GptShape& shape, DevicePool& pool, cudaStream_t stream)
    : shape_(shape), pool_(&pool), stream_(stream) {
  lt_ = as_system_error([] { return kc::CublasLtHandle::create(); });
  ln_scratch_ = pool.allocate(kc::layernorm_backward_scratch_floats(shape.BT(), shape.C) * kF32,
                              "backward_scratch");
  attention_scratch_ = pool.allocate(
      kc::attention_backward_scratch_floats(shape.B, shape.T, shape.NH) * kF32, "backward_scratch");
}

DeviceBlock GptKernels::bf16s(std::int64_t n, const std::string& tag) const {
  return pool_->allocate_uninitialized(n * kBf16, tag);
}

DeviceBlock GptKernels::floats(std::int64_t n, const std::string& tag) const {
  return pool_->allocate_uninitialized(n * kF32, tag);
}

void layer_forward(const GptKernels& k, const LayerWeights& w, const bf16* x, bf16* y,
                   LayerSaved& s) {
  const GptShape& d = k.shape();
  const int BT = d.BT();
  const std::int64_t n = d.act();
  cudaStream_t st = k.stream();
  s = {};
  s.ln1_out = k.bf16s(n, "act/ln1_out");
  s.ln1_mean = k.floats(BT, "act/ln1_mean");
  s.ln1_rstd = k.floats(BT, "act/ln1_rstd");
  kc::layernorm_forward(s.ln1_out.as<bf16>(), s.ln1_mean.as<float>(), s.ln1_rstd.as<float>(), x,
                        w.ln1_w, w.ln1_b, BT, d.C, st);
  s.qkv = k.bf16s(3 * n, "act/qkv");
  kc::matmul_forward(s.qkv.as<bf16>(), s.ln1_out.as<bf16>(), w.qkv_w, w.qkv_b, BT, d.C, 3 * d.C,
                     k.lt(), st);
  s.att = k.bf16s(n, "act/attn_out");
  s.lse = k.floats(static_cast<std::int64_t>(d.B) * d.NH * d.T, "act/attn_lse");
  kc::attention_forward(s.att.as<bf16>(), s.lse.as<float>(), s.qkv.as<bf16>(), d.B, d.T, d.C,
                        d.NH, st);
  {
    DeviceBlock proj = k.bf16s(n, "forward_scratch");
    kc::matmul_forward(proj.as<bf16>(), s.att.as<bf16>(), w.proj_w, w.proj_b, BT, d.C, d.C,
                       k.lt(), st);
    s.resid = k.bf16s(n, "act/ln2_in");
    s.ln2_out = k.bf16s(n, "act/ln2_out");
    s.ln2_mean = k.floats(BT, "act/ln2_mean");
    s.ln2_rstd = k.floats(BT, "act/ln2_rstd");
    kc::fused_residual_layernorm_forward(s.resid.as<bf16>(), s.ln2_out.as<bf16>(),
                                         s.ln2_mean.as<float>(), s.ln2_rstd.as<float>(), x,
                                         proj.as<bf16>(), w.ln2_w, w.ln2_b, BT, d.C, st);
  }
  const std::int64_t nf = static_cast<std::int64_t>(BT) * d.F;
  s.pre_gelu = k.bf16s(nf, "act/fc1_out");
  s.gelu = k.bf16s(nf, "act/gelu_out");
  kc::matmul_forward(s.gelu.as<bf16>(), s.ln2_out.as<bf16>(), w.fc_w, w.fc_b, BT, d.C, d.F,
                     k.lt(), st, kc::GemmActivation::kGelu, s.pre_gelu.as<bf16>());
  kc::matmul_forward_residual(y, s.gelu.as<bf16>(), w.fc2_w, w.fc2_b, s.resid.as<bf16>(), BT,
                              d.F, d.C, k.lt(), st);
}

void layer_backward(const GptKernels& k, const LayerWeights& w, const LayerGrads& g,
                    const bf16* x, LayerSaved& s, bf16* dres) {
  const GptShape& d = k.shape();
  const int BT = d.BT();
  const std::int64_t n = d.act();
  cudaStream_t st = k.stream();
  {
    // MLP: dres holds dy = d(fc2 out) = d(r) so far.
    DeviceBlock dh = k.bf16s(static_cast<std::int64_t>(BT) * d.F, "backward_scratch");
    // dh = gelu'(pre) * (dy @ Wfc2): the GeLU backward rides in the matmul's epilogue.
    kc::matmul_backward_dgelu(dh.as<bf16>(), g.fc2_w, g.fc2_b, dres, s.gelu.as<bf16>(), w.fc2_w,
                              s.pre_gelu.as<bf16>(), BT, d.F, d.C, k.lt(), st);
    s.gelu.reset();
    s.pre_gelu.reset();
    DeviceBlock dln2 = k.bf16s(n, "backward_scratch");
    kc::matmul_backward(dln2.as<bf16>(), g.fc_w, g.fc_b, dh.as<bf16>(), s.ln2_out.as<bf16>(),
                        w.fc_w, BT, d.C, d.F, k.lt(), st, /*overwrite_dinp=*/true);
    dh.reset();
    kc::layernorm_backward(dres, g.ln2_w, g.ln2_b, dln2.as<bf16>(), s.resid.as<bf16>(), w.ln2_w,
                           s.ln2_mean.as<float>(), s.ln2_rstd.as<float>(), BT, d.C,
                           k.ln_scratch(), st);
  }
  s.ln2_out.reset();
  s.resid.reset();
  {
    // Attention: dres now holds d(r).
    DeviceBlock datt = k.bf16s(n, "backward_scratch");
    kc::matmul_backward(datt.as<bf16>(), g.proj_w, g.proj_b, dres, s.att.as<bf16>(), w.proj_w,
                        BT, d.C, d.C, k.lt(), st, /*overwrite_dinp=*/true);
    DeviceBlock dqkv = k.bf16s(3 * n, "backward_scratch");  // every element written below
    kc::attention_backward(dqkv.as<bf16>(), k.attention_scratch(), datt.as<bf16>(),
                           s.qkv.as<bf16>(), s.att.as<bf16>(), s.lse.as<float>(), d.B, d.T, d.C,
                           d.NH, st, /*overwrite=*/true);
    datt.reset();
    s.att.reset();
    s.lse.reset();
    DeviceBlock dln1 = k.bf16s(n, "backward_scratch");
    kc::matmul_backward(dln1.as<bf16>(), g.qkv_w, g.qkv_b, dqkv.as<bf16>(), s.ln1_out.as<bf16>(),
                        w.qkv_w, BT, d.C, 3 * d.C, k.lt(), st, /*overwrite_dinp=*/true);
    dqkv.reset();
    kc::layernorm_backward(dres, g.ln1_w, g.ln1_b, dln1.as<bf16>(), x, w.ln1_w,
                           s.ln1_mean.as<float>(), s.ln1_rstd.as<float>(), BT, d.C,
                           k.ln_scratch(), st);
  }
  s = {};
}

void embedding_forward(const GptKernels& k, const bf16* wte, const bf16* wpe,
                       const std::int32_t* tokens, bf16* x) {
  const GptShape& d = k.shape();
  kc::embedding_forward(x, tokens, wte, wpe, d.B, d.T, d.C, 0, d.V, k.stream());
}

void embedding_backward(const GptKernels& k, float* dwte, float* dwpe, const bf16* dx,
                        const std::int32_t* tokens) {
  const GptShape& d = k.shape();
  kc::embedding_backward(dwte, dwpe, dx, tokens, d.B, d.T, d.C, 0, d.V, k.stream());
}

void head_forward(const GptKernels& k, const bf16* x, const bf16* lnf_w, const bf16* lnf_b,
                  const bf16* wte, float* dwte, const std::int32_t* targets,
                  const float* dlosses, float* losses, HeadSaved& s) {
  const GptShape& d = k.shape();
  const int BT = d.BT();
  cudaStream_t st = k.stream();
  s = {};
  s.lnf_mean = k.floats(BT, "act/lnf_mean");
  s.lnf_rstd = k.floats(BT, "act/lnf_rstd");
  DeviceBlock lnf_out = k.bf16s(d.act(), "forward_scratch");
  kc::layernorm_forward(lnf_out.as<bf16>(), s.lnf_mean.as<float>(), s.lnf_rstd.as<float>(), x,
                        lnf_w, lnf_b, BT, d.C, st);
  // Logits in bf16, the loss's backward in place over them (no second (BT, V) buffer).
  DeviceBlock logits = k.bf16s(static_cast<std::int64_t>(BT) * d.Vp, "logits");
  kc::matmul_forward(logits.as<bf16>(), lnf_out.as<bf16>(), wte, nullptr, BT, d.C, d.Vp, k.lt(),
                     st);
  DeviceBlock row_max = k.floats(BT, "forward_scratch");
  DeviceBlock row_lse = k.floats(BT, "forward_scratch");
  kc::cross_entropy_forward_backward(losses, row_max.as<float>(), row_lse.as<float>(),
                                     logits.as<bf16>(), dlosses, targets, BT, d.V, st, d.Vp);
  s.lnf_dout = k.bf16s(d.act(), "act/lnf_dout");
  kc::matmul_backward(s.lnf_dout.as<bf16>(), dwte, nullptr, logits.as<bf16>(), lnf_out.as<bf16>(),
                      wte, BT, d.C, d.Vp, k.lt(), st, /*overwrite_dinp=*/true);
}

void head_backward(const GptKernels& k, const bf16* x, const bf16* lnf_w, float* dlnf_w,
                   float* dlnf_b, HeadSaved& s, bf16* dx) {
  const GptShape& d = k.shape();
  as_system_error([&] {
    CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<std::size_t>(d.act() * kBf16), k.stream()));
  });
  kc::layernorm_backward(dx, dlnf_w, dlnf_b, s.lnf_dout.as<bf16>(), x, lnf_w,
                         s.lnf_mean.as<float>(), s.lnf_rstd.as<float>(), d.BT(), d.C,
                         k.ln_scratch(), k.stream());
  s = {};
}

}  // namespace strata::cuda
