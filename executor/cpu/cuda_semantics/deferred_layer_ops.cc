// The CPU kernels queued on the simulated compute stream (see deferred_layer_ops.h). Each op
// lists its reads before its writes (an accumulated output is both), in elements of fp32 or
// int32, from the shapes layer_ops.h gives.
#include "executor/cpu/cuda_semantics/deferred_layer_ops.h"

#include <utility>

#include "executor/cpu/cuda_semantics/cuda_semantics_backend.h"

namespace strata::cuda_semantics {
namespace {

constexpr std::int64_t kF = 4;  // bytes of an fp32 or int32 element

std::int64_t n(int a, int b) { return static_cast<std::int64_t>(a) * b; }
Access r(const void* p, std::int64_t elements) { return Access{p, elements * kF, false}; }
Access w(const void* p, std::int64_t elements) { return Access{p, elements * kF, true}; }

}  // namespace

void DeferredLayerOps::launch(const char* op, std::vector<Access> accesses,
                              std::function<void()> kernel) {
  scheduler_->enqueue(SimStream::kCompute, op, accesses, std::move(kernel));
}

engine::Tensor DeferredLayerOps::activations(std::int64_t count, const std::string& tag) {
  return backend_->device_block(DType::kF32, count, tag);
}

engine::Tensor DeferredLayerOps::floats(std::int64_t count, const std::string& tag) {
  return backend_->device_block(DType::kF32, count, tag);
}

void DeferredLayerOps::layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                                         const void* wt, const void* b, int rows, int C) {
  launch("layernorm_forward",
         {r(inp, n(rows, C)), r(wt, C), r(b, C), w(out, n(rows, C)), w(mean, rows), w(rstd, rows)},
         [=, this] { cpu_.layernorm_forward(out, mean, rstd, inp, wt, b, rows, C); });
}

void DeferredLayerOps::residual_layernorm_forward(void* resid, void* out, float* mean,
                                                  float* rstd, const void* x, const void* y,
                                                  const void* bias, const void* wt, const void* b,
                                                  int rows, int C) {
  launch("residual_layernorm_forward",
         {r(x, n(rows, C)), r(y, n(rows, C)), r(bias, C), r(wt, C), r(b, C), w(resid, n(rows, C)),
          w(out, n(rows, C)), w(mean, rows), w(rstd, rows)},
         [=, this] {
           cpu_.residual_layernorm_forward(resid, out, mean, rstd, x, y, bias, wt, b, rows, C);
         });
}

void DeferredLayerOps::layernorm_backward(void* dinp, float* dw, float* db, const void* dout,
                                          const void* inp, const void* wt, const float* mean,
                                          const float* rstd, int rows, int C) {
  launch("layernorm_backward",
         {r(dout, n(rows, C)), r(inp, n(rows, C)), r(wt, C), r(mean, rows), r(rstd, rows),
          r(dinp, n(rows, C)), r(dw, C), r(db, C), w(dinp, n(rows, C)), w(dw, C), w(db, C)},
         [=, this] { cpu_.layernorm_backward(dinp, dw, db, dout, inp, wt, mean, rstd, rows, C); });
}

void DeferredLayerOps::rmsnorm_forward(void* out, float* rstd, const void* inp, const void* wt,
                                       int rows, int C, float eps) {
  launch("rmsnorm_forward", {r(inp, n(rows, C)), r(wt, C), w(out, n(rows, C)), w(rstd, rows)},
         [=, this] { cpu_.rmsnorm_forward(out, rstd, inp, wt, rows, C, eps); });
}

void DeferredLayerOps::residual_rmsnorm_forward(void* resid, void* out, float* rstd,
                                                const void* x, const void* y, const void* bias,
                                                const void* wt, int rows, int C, float eps) {
  launch("residual_rmsnorm_forward",
         {r(x, n(rows, C)), r(y, n(rows, C)), r(bias, C), r(wt, C), w(resid, n(rows, C)),
          w(out, n(rows, C)), w(rstd, rows)},
         [=, this] {
           cpu_.residual_rmsnorm_forward(resid, out, rstd, x, y, bias, wt, rows, C, eps);
         });
}

void DeferredLayerOps::rmsnorm_backward(void* dinp, float* dw, const void* dout, const void* inp,
                                        const void* wt, const float* rstd, int rows, int C) {
  launch("rmsnorm_backward",
         {r(dout, n(rows, C)), r(inp, n(rows, C)), r(wt, C), r(rstd, rows), r(dinp, n(rows, C)),
          r(dw, C), w(dinp, n(rows, C)), w(dw, C)},
         [=, this] { cpu_.rmsnorm_backward(dinp, dw, dout, inp, wt, rstd, rows, C); });
}

void DeferredLayerOps::matmul_forward(void* out, const void* inp, const void* wt,
                                      const void* bias, int BT, int C, int OC) {
  launch("matmul_forward", {r(inp, n(BT, C)), r(wt, n(OC, C)), r(bias, OC), w(out, n(BT, OC))},
         [=, this] { cpu_.matmul_forward(out, inp, wt, bias, BT, C, OC); });
}

void DeferredLayerOps::matmul_gelu_forward(void* out, void* pre, const void* inp, const void* wt,
                                           const void* bias, int BT, int C, int OC) {
  launch("matmul_gelu_forward",
         {r(inp, n(BT, C)), r(wt, n(OC, C)), r(bias, OC), w(pre, n(BT, OC)), w(out, n(BT, OC))},
         [=, this] { cpu_.matmul_gelu_forward(out, pre, inp, wt, bias, BT, C, OC); });
}

void DeferredLayerOps::matmul_residual_forward(void* out, const void* inp, const void* wt,
                                               const void* bias, const void* residual, int BT,
                                               int C, int OC) {
  launch("matmul_residual_forward",
         {r(inp, n(BT, C)), r(wt, n(OC, C)), r(bias, OC), r(residual, n(BT, OC)),
          w(out, n(BT, OC))},
         [=, this] { cpu_.matmul_residual_forward(out, inp, wt, bias, residual, BT, C, OC); });
}

void DeferredLayerOps::matmul_backward(void* dinp, float* dw, float* db, const void* dout,
                                       const void* inp, const void* wt, int BT, int C, int OC) {
  launch("matmul_backward",
         {r(dout, n(BT, OC)), r(inp, n(BT, C)), r(wt, n(OC, C)), r(dw, n(OC, C)), r(db, OC),
          w(dinp, n(BT, C)), w(dw, n(OC, C)), w(db, OC)},
         [=, this] { cpu_.matmul_backward(dinp, dw, db, dout, inp, wt, BT, C, OC); });
}

void DeferredLayerOps::matmul_gelu_backward(void* dinp, float* dw, float* db, const void* dout,
                                            const void* gelu_out, const void* wt, const void* pre,
                                            int BT, int C, int OC) {
  launch("matmul_gelu_backward",
         {r(dout, n(BT, OC)), r(gelu_out, n(BT, C)), r(wt, n(OC, C)), r(pre, n(BT, C)),
          r(dw, n(OC, C)), r(db, OC), w(dinp, n(BT, C)), w(dw, n(OC, C)), w(db, OC)},
         [=, this] { cpu_.matmul_gelu_backward(dinp, dw, db, dout, gelu_out, wt, pre, BT, C, OC); });
}

void DeferredLayerOps::swiglu_forward(void* out, const void* inp, int BT, int F) {
  launch("swiglu_forward", {r(inp, n(BT, 2 * F)), w(out, n(BT, F))},
         [=, this] { cpu_.swiglu_forward(out, inp, BT, F); });
}

void DeferredLayerOps::matmul_swiglu_backward(void* dinp, float* dw, float* db, const void* dout,
                                              void* swiglu_out, const void* wt, const void* pre,
                                              int BT, int C, int OC) {
  launch("matmul_swiglu_backward",
         {r(dout, n(BT, OC)), r(swiglu_out, n(BT, C)), r(wt, n(OC, C)), r(pre, n(BT, 2 * C)),
          r(dw, n(OC, C)), r(db, OC), w(dinp, n(BT, 2 * C)), w(swiglu_out, n(BT, C)),
          w(dw, n(OC, C)), w(db, OC)},
         [=, this] {
           cpu_.matmul_swiglu_backward(dinp, dw, db, dout, swiglu_out, wt, pre, BT, C, OC);
         });
}

void DeferredLayerOps::rope_forward(void* x, int B, int T, int heads, int HS, int row_stride,
                                    const kernels::RopeFrequencies& freq) {
  launch("rope_forward", {r(x, n(B * T, row_stride)), w(x, n(B * T, row_stride))},
         [=, this] { cpu_.rope_forward(x, B, T, heads, HS, row_stride, freq); });
}

void DeferredLayerOps::rope_backward(void* dx, int B, int T, int heads, int HS, int row_stride,
                                     const kernels::RopeFrequencies& freq) {
  launch("rope_backward", {r(dx, n(B * T, row_stride)), w(dx, n(B * T, row_stride))},
         [=, this] { cpu_.rope_backward(dx, B, T, heads, HS, row_stride, freq); });
}

void DeferredLayerOps::attention_forward(void* out, float* stats, const void* qkv, int B, int T,
                                         int C, int NH, int KVH) {
  const int width = C + 2 * KVH * (C / NH);  // [q | k | v]
  launch("attention_forward",
         {r(qkv, n(B * T, width)), w(out, n(B * T, C)),
          w(stats, cpu_.attention_stats_floats(B, T, NH))},
         [=, this] { cpu_.attention_forward(out, stats, qkv, B, T, C, NH, KVH); });
}

void DeferredLayerOps::attention_backward(void* dqkv, const void* dout, const void* qkv,
                                          const void* out, const float* stats, int B, int T,
                                          int C, int NH, int KVH) {
  const int width = C + 2 * KVH * (C / NH);
  launch("attention_backward",
         {r(dout, n(B * T, C)), r(qkv, n(B * T, width)), r(out, n(B * T, C)),
          r(stats, cpu_.attention_stats_floats(B, T, NH)), w(dqkv, n(B * T, width))},
         [=, this] { cpu_.attention_backward(dqkv, dout, qkv, out, stats, B, T, C, NH, KVH); });
}

void DeferredLayerOps::bias_residual(void* out, const void* y, const void* bias,
                                     const void* residual, int rows, int C) {
  launch("bias_residual",
         {r(y, n(rows, C)), r(bias, C), r(residual, n(rows, C)), w(out, n(rows, C))},
         [=, this] { cpu_.bias_residual(out, y, bias, residual, rows, C); });
}

void DeferredLayerOps::add_bias(void* out, const void* bias, int rows, int C) {
  launch("add_bias", {r(bias, C), r(out, n(rows, C)), w(out, n(rows, C))},
         [=, this] { cpu_.add_bias(out, bias, rows, C); });
}

void DeferredLayerOps::copy(void* dst, const void* src, std::int64_t count) {
  launch("copy", {r(src, count), w(dst, count)}, [=, this] { cpu_.copy(dst, src, count); });
}

void DeferredLayerOps::zero(void* dst, std::int64_t count) {
  launch("zero", {w(dst, count)}, [=, this] { cpu_.zero(dst, count); });
}

void DeferredLayerOps::embedding_forward(void* out, const std::int32_t* tokens, const void* wte,
                                         const void* wpe, int B, int T, int C, int v0, int v1) {
  launch("embedding_forward",
         {r(tokens, n(B, T)), r(wte, n(v1 - v0, C)), r(wpe, n(T, C)), w(out, n(B * T, C))},
         [=, this] { cpu_.embedding_forward(out, tokens, wte, wpe, B, T, C, v0, v1); });
}

void DeferredLayerOps::embedding_backward(float* dwte, float* dwpe, const void* dout,
                                          const std::int32_t* tokens, int B, int T, int C, int v0,
                                          int v1) {
  launch("embedding_backward",
         {r(dout, n(B * T, C)), r(tokens, n(B, T)), r(dwte, n(v1 - v0, C)), r(dwpe, n(T, C)),
          w(dwte, n(v1 - v0, C)), w(dwpe, n(T, C))},
         [=, this] { cpu_.embedding_backward(dwte, dwpe, dout, tokens, B, T, C, v0, v1); });
}

void DeferredLayerOps::cross_entropy_forward_backward(float* losses, engine::Tensor& logits,
                                                      const float* dlosses,
                                                      const std::int32_t* targets, int BT,
                                                      int Vlocal, int ld, int v0,
                                                      model::TpContext& tp) {
  scheduler_->run_now(
      SimStream::kCompute, "cross_entropy_forward_backward",
      {r(logits.data(), n(BT, ld)), r(dlosses, BT), r(targets, BT), w(losses, BT),
       w(logits.data(), n(BT, ld))},
      [&] {
        cpu_.cross_entropy_forward_backward(losses, logits, dlosses, targets, BT, Vlocal, ld, v0, tp);
      });
  logits = backend_->adopt(std::move(logits), "dlogits");
}

}  // namespace strata::cuda_semantics
