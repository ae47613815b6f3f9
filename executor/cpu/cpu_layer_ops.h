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

#define STRATA_LAYER_KERNEL(name, uses, params, args, flops, ...) void name params override;
#include "executor/model/layer_kernels.def"
  void cross_entropy_forward_backward(float* losses, Tensor& logits, const float* dlosses,
                                      const std::int32_t* targets, int BT, int Vlocal, int ld,
                                      int v0, model::TpContext& tp) override;

 private:
  AccountingAllocator* alloc_;
};

}  // namespace strata::cpu_backend
