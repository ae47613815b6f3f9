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

  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* w,
                         const void* b, int rows, int C) override;
  void residual_layernorm_forward(void* resid, void* out, float* mean, float* rstd, const void* x,
                                  const void* y, const void* bias, const void* w, const void* b,
                                  int rows, int C) override;
  void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* w, int rows, int C,
                       float eps) override;
  void residual_rmsnorm_forward(void* resid, void* out, float* rstd, const void* x, const void* y,
                                const void* bias, const void* w, int rows, int C,
                                float eps) override;
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
  void bias_residual(void* out, const void* y, const void* bias, const void* residual, int rows,
                     int C) override;
  void add_bias(void* out, const void* bias, int rows, int C) override;
  void copy(void* dst, const void* src, std::int64_t n) override;
  void zero(void* dst, std::int64_t n) override;
  void embedding_forward(void* out, const std::int32_t* tokens, const void* wte, const void* wpe,
                         int B, int T, int C, int v0, int v1) override;
  void embedding_backward(float* dwte, float* dwpe, const void* dout, const std::int32_t* tokens,
                          int B, int T, int C, int v0, int v1) override;

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
  void layernorm_backward_with(void* dinp, float* dw, float* db, const void* dout, const void* inp,
                               const void* w, const float* mean, const float* rstd, int rows, int C,
                               float* scratch) override;
  void rmsnorm_backward_with(void* dinp, float* dw, const void* dout, const void* inp,
                             const void* w, const float* rstd, int rows, int C,
                             float* scratch) override;
  void attention_backward_with(void* dqkv, const void* dout, const void* qkv, const void* out,
                               const float* stats, int B, int T, int C, int NH, int KVH,
                               float* scratch) override;
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
