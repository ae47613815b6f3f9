// The CPU backend's LayerOps (executor/model/layer_ops.h): kernels/cpu in fp32 over host
// memory of the accounting allocator's device tier. Fused ops are composed from the unfused
// kernels in the order the unfused model runs them (matmul then GeLU, matmul then residual,
// bias then residual then LayerNorm or RMSNorm), so they round the same way.
// Deliberately not here: communication (the vocab-parallel loss gets its TP group passed in).
#pragma once

#include "executor/memory/accounting_allocator.h"
#include "executor/model/layer_ops.h"

namespace strata::cpu_backend {

using engine::Tensor;

// A Tensor over an accounted Buffer.
Tensor tensor_of(Buffer buffer, DType dtype, MemoryTier tier);

class CpuLayerOps final : public model::LayerOps {
 public:
  explicit CpuLayerOps(AccountingAllocator& alloc) : alloc_(&alloc) {}

  DType dtype() const override { return DType::kF32; }
  Tensor activations(std::int64_t n, const std::string& tag) override;
  Tensor floats(std::int64_t n, const std::string& tag) override { return activations(n, tag); }
  std::int64_t attention_stats_floats(int B, int T, int NH) const override;
  const char* attention_stats_name() const override { return "attn_lse"; }
  int logits_width(int valid, int shard_rows) const override { return valid; }

  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* w,
                         const void* b, int rows, int C) override;
  void residual_layernorm_forward(void* resid, void* out, float* mean, float* rstd, const void* x,
                                  const void* y, const void* bias, const void* w, const void* b,
                                  int rows, int C) override;
  void layernorm_backward(void* dinp, float* dw, float* db, const void* dout, const void* inp,
                          const void* w, const float* mean, const float* rstd, int rows,
                          int C) override;
  void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* w, int rows, int C,
                       float eps) override;
  void residual_rmsnorm_forward(void* resid, void* out, float* rstd, const void* x, const void* y,
                                const void* bias, const void* w, int rows, int C,
                                float eps) override;
  void rmsnorm_backward(void* dinp, float* dw, const void* dout, const void* inp, const void* w,
                        const float* rstd, int rows, int C) override;
  void matmul_forward(void* out, const void* inp, const void* w, const void* bias, int BT, int C,
                      int OC) override;
  void matmul_gelu_forward(void* out, void* pre, const void* inp, const void* w, const void* bias,
                           int BT, int C, int OC) override;
  void matmul_residual_forward(void* out, const void* inp, const void* w, const void* bias,
                               const void* residual, int BT, int C, int OC) override;
  void matmul_backward(void* dinp, float* dw, float* db, const void* dout, const void* inp,
                       const void* w, int BT, int C, int OC) override;
  void matmul_gelu_backward(void* dinp, float* dw, float* db, const void* dout,
                            const void* gelu_out, const void* w, const void* pre, int BT, int C,
                            int OC) override;
  void swiglu_forward(void* out, const void* inp, int BT, int F) override;
  void matmul_swiglu_backward(void* dinp, float* dw, float* db, const void* dout,
                              void* swiglu_out, const void* w, const void* pre, int BT, int C,
                              int OC) override;
  void rope_forward(void* x, int B, int T, int heads, int HS, int row_stride,
                    const kernels::RopeFrequencies& freq) override;
  void rope_backward(void* dx, int B, int T, int heads, int HS, int row_stride,
                     const kernels::RopeFrequencies& freq) override;
  void attention_forward(void* out, float* stats, const void* qkv, int B, int T, int C, int NH,
                         int KVH) override;
  void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                          const float* stats, int B, int T, int C, int NH, int KVH) override;
  void bias_residual(void* out, const void* y, const void* bias, const void* residual, int rows,
                     int C) override;
  void add_bias(void* out, const void* bias, int rows, int C) override;
  void copy(void* dst, const void* src, std::int64_t n) override;
  void zero(void* dst, std::int64_t n) override;
  void embedding_forward(void* out, const std::int32_t* tokens, const void* wte, const void* wpe,
                         int B, int T, int C, int v0, int v1) override;
  void embedding_backward(float* dwte, float* dwpe, const void* dout, const std::int32_t* tokens,
                          int B, int T, int C, int v0, int v1) override;
  void cross_entropy_forward_backward(float* losses, Tensor& logits, const float* dlosses,
                                      const std::int32_t* targets, int BT, int Vlocal, int ld,
                                      int v0, model::TpContext& tp) override;

 private:
  AccountingAllocator* alloc_;
};

}  // namespace strata::cpu_backend
