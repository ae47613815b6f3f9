// The CUDA backend's LayerOps (executor/model/layer_ops.h): kernels/cuda in bf16 mixed
// precision on the compute stream, activations from the accounted DevicePool. The fused ops
// are real fused kernels here (cuBLASLt epilogues: bias, GeLU, DGELU; the residual as the
// GEMM's C operand; residual + LayerNorm in one kernel; the loss and its backward in one
// pass over the logits). The wte shard is padded to whole 128-row blocks
// (partition.h: vocab_row_alignment), so the logits GEMM covers all of its rows.
// What they allocate, and how wide, is CudaShapedLayerOps' (cuda_op_allocations.h): this
// class runs the kernels on the memory handed to it.
// Deliberately not here: the optimizer, copies between tiers (cuda_backend.h).
#pragma once

#include <functional>
#include <vector>

#include <cuda_runtime.h>

#include "executor/cuda/cuda_op_allocations.h"
#include "executor/cuda/device_pool.h"
#include "executor/engine/backend.h"
#include "kernels/cuda/attention_launcher.h"
#include "kernels/cuda/cuda_resources.h"

namespace strata::cuda {

using engine::Tensor;

// A Tensor over a DevicePool block.
Tensor tensor_of(DeviceBlock block, DType dtype);

class CudaLayerOps final : public CudaShapedLayerOps {
 public:
  // pool and stream must outlive the ops. Throws SystemError when cuBLASLt cannot start.
  // attention: cuDNN's fused attention or strata's kernels (attention_launcher.h).
  CudaLayerOps(DevicePool& pool, cudaStream_t stream,
               kernels::cuda::AttentionMode attention = kernels::cuda::AttentionMode::kAuto);

  // The kernels (layer_kernels.def) but those CudaShapedLayerOps gives a workspace.
#define STRATA_LAYER_KERNEL(name, uses, params, args, flops, ...) void name params override;
#define STRATA_LAYER_KERNEL_WITH_SCRATCH(name, uses, params, args, flops, ...)
#include "executor/model/layer_kernels.def"

  // Kernel tracing (CudaBackendOptions::kernel_trace): from now on every op is a span between
  // two marks of `stamp` (the backend's compute-stream timestamps), listed by spans() until
  // clear_spans(). An op called inside another is part of the outer one's span.
  void trace_kernels(std::function<int()> stamp);
  const std::vector<engine::TimedKernel>& spans() const { return spans_; }
  void clear_spans() { spans_.clear(); }
  // Which attention ran, per shape and direction, and why (AttentionLauncher::notes).
  std::vector<std::string> attention_notes() const { return attention_.notes(); }

 protected:
  Tensor block(std::int64_t bytes, DType dtype, const std::string& tag) override;
#define STRATA_LAYER_KERNEL(name, uses, params, args, flops, ...)
#define STRATA_LAYER_KERNEL_WITH_SCRATCH(name, uses, params, args, flops, ...) \
  void name##_with STRATA_WITH_SCRATCH params override;
#include "executor/model/layer_kernels.def"
  void cross_entropy_with(float* losses, Tensor& logits, const float* dlosses,
                          const std::int32_t* targets, int BT, int Vlocal, int ld, int v0,
                          model::TpContext& tp, float* stats) override;

 private:
  template <class Body>
  void timed(const char* name, Body&& body);  // runs body, a span of its own when tracing

  DevicePool* pool_;
  cudaStream_t stream_;
  kernels::cuda::CublasLtHandle lt_;
  kernels::cuda::AttentionLauncher attention_;
  std::function<int()> stamp_;  // set: kernel tracing on
  std::vector<engine::TimedKernel> spans_;
  int depth_ = 0;               // ops under way (timed() nests)
};

}  // namespace strata::cuda
