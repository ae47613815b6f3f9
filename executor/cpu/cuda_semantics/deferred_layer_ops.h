// The layer ops of the CUDA-semantics CPU mode: the CPU backend's kernels (cpu_layer_ops.h),
// each queued on the simulated compute stream with the bytes it reads and writes (the list
// layer_kernels.def gives each), as the CUDA backend launches them on its compute stream.
// The vocab-parallel loss runs at once (it holds the TP group's collectives, which are
// communicators' ops). Activations come from the backend's stream-ordered pool.
// Deliberately not here: the arithmetic (CpuLayerOps), the pool (the backend).
#pragma once

#include "executor/cpu/cpu_layer_ops.h"
#include "executor/cpu/cuda_semantics/stream_scheduler.h"
#include "executor/model/layer_ops.h"

namespace strata::cuda_semantics {

class CudaSemanticsBackend;

class DeferredLayerOps final : public model::LayerOps {
 public:
  DeferredLayerOps(AccountingAllocator& alloc, CudaSemanticsBackend& backend,
                   StreamScheduler& scheduler)
      : cpu_(alloc), backend_(&backend), scheduler_(&scheduler) {}

  DType dtype() const override { return DType::kF32; }
  engine::Tensor activations(std::int64_t n, const std::string& tag) override;
  engine::Tensor floats(std::int64_t n, const std::string& tag) override;
  std::int64_t attention_stats_floats(int B, int T, int NH) const override {
    return cpu_.attention_stats_floats(B, T, NH);
  }
  const char* attention_stats_name() const override { return cpu_.attention_stats_name(); }
  int logits_width(int valid, int shard_rows) const override {
    return cpu_.logits_width(valid, shard_rows);
  }

#define STRATA_LAYER_KERNEL(name, uses, params, args, flops, ...) void name params override;
#include "executor/model/layer_kernels.def"
  void cross_entropy_forward_backward(float* losses, engine::Tensor& logits, const float* dlosses,
                                      const std::int32_t* targets, int BT, int Vlocal, int ld,
                                      int v0, model::TpContext& tp) override;

 private:
  void launch(const char* op, std::vector<Access> accesses, std::function<void()> kernel);

  cpu_backend::CpuLayerOps cpu_;
  CudaSemanticsBackend* backend_;
  StreamScheduler* scheduler_;
};

}  // namespace strata::cuda_semantics
