// CudaShapedLayerOps: everything the CUDA backend's LayerOps decides about device memory, in
// plain C++ with no CUDA include, so that the same code runs under the real ops
// (cuda_layer_ops.h, on the DevicePool) and under the GPU-less recorder of their pool
// requests (pool_recorder.h) that the memory model's CPU-side test replays the engine on:
//   - the widths: bf16 activations, fp32 statistics, flash attention's (B, NH, T) log-sum-
//     exp, logits over every row of the 128-aligned wte shard (partition.h);
//   - the scratch each op asks for, in the order it asks: LayerNorm's and RMSNorm's backward
//     partials and
//     attention backward's row sums (kernels/cuda/scratch_sizes.h), the loss's four row
//     statistics;
//   - the request itself: bytes = elements x the dtype's width, accounted under the tag.
// An op that needs memory gets it here and runs in a *_with hook that receives it; the
// derived classes implement the hooks and the ops that allocate nothing, and never allocate
// themselves (their only way to the pool is block()). So the recorder cannot drift from
// the GPU: both inherit every allocating line.
// Deliberately not here: the kernels (cuda_layer_ops.cc), the pool (device_pool.h).
#pragma once

#include <cstdint>
#include <string>

#include "executor/model/layer_ops.h"

// A kernel's parameter list (layer_kernels.def) with the workspace appended: the hooks'.
#define STRATA_WITH_SCRATCH(...) (__VA_ARGS__, float* scratch)

namespace strata::cuda {

// Bytes the CUDA backend asks its pool for n elements of `dtype` (CudaBackend::allocate
// and the LayerOps alike).
std::int64_t pool_request_bytes(DType dtype, std::int64_t n);

class CudaShapedLayerOps : public model::LayerOps {
 public:
  DType dtype() const final { return DType::kBF16; }
  engine::Tensor activations(std::int64_t n, const std::string& tag) final;
  engine::Tensor floats(std::int64_t n, const std::string& tag) final;
  std::int64_t attention_stats_floats(int B, int T, int NH) const final;
  const char* attention_stats_name() const final { return "attn_lse"; }
  // Every row of the aligned shard (unaligned logits GEMMs ran 7x slower on an H100).
  int logits_width(int /*valid*/, int shard_rows) const final { return shard_rows; }

  // The kernels that need a workspace (layer_kernels.def): allocated here, run by the hooks.
#define STRATA_LAYER_KERNEL(name, uses, params, args, flops, ...)
#define STRATA_LAYER_KERNEL_WITH_SCRATCH(name, uses, params, args, flops, ...) \
  void name params final;
#include "executor/model/layer_kernels.def"
  void cross_entropy_forward_backward(float* losses, engine::Tensor& logits,
                                      const float* dlosses, const std::int32_t* targets, int BT,
                                      int Vlocal, int ld, int v0, model::TpContext& tp) final;

 protected:
  // A pool block of `bytes` for n elements of `dtype` under `tag`, contents undefined.
  virtual engine::Tensor block(std::int64_t bytes, DType dtype, const std::string& tag) = 0;
  // The allocating ops' work, given the scratch allocated for them above: name_with, the
  // kernel's parameters and then `float* scratch`.
#define STRATA_LAYER_KERNEL(name, uses, params, args, flops, ...)
#define STRATA_LAYER_KERNEL_WITH_SCRATCH(name, uses, params, args, flops, ...) \
  virtual void name##_with STRATA_WITH_SCRATCH params = 0;
#include "executor/model/layer_kernels.def"
  // stats: 4 BT floats (row max, sum of exp, target logit, log-sum-exp).
  virtual void cross_entropy_with(float* losses, engine::Tensor& logits, const float* dlosses,
                                  const std::int32_t* targets, int BT, int Vlocal, int ld, int v0,
                                  model::TpContext& tp, float* stats) = 0;
};

}  // namespace strata::cuda
