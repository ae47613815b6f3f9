// The CUDA LayerOps' device memory requests (see cuda_op_allocations.h).
#include "executor/cuda/cuda_op_allocations.h"

#include "kernels/cuda/scratch_sizes.h"

namespace strata::cuda {
namespace kc = kernels::cuda;

std::int64_t pool_request_bytes(DType dtype, std::int64_t n) { return n * dtype_bytes(dtype); }

engine::Tensor CudaShapedLayerOps::activations(std::int64_t n, const std::string& tag) {
  return block(pool_request_bytes(DType::kBF16, n), DType::kBF16, tag);
}

engine::Tensor CudaShapedLayerOps::floats(std::int64_t n, const std::string& tag) {
  return block(pool_request_bytes(DType::kF32, n), DType::kF32, tag);
}

std::int64_t CudaShapedLayerOps::attention_stats_floats(int B, int T, int NH) const {
  // Flash attention keeps one log-sum-exp per (batch, head, query).
  return static_cast<std::int64_t>(B) * NH * T;
}

void CudaShapedLayerOps::layernorm_backward(void* dinp, float* dw, float* db, const void* dout,
                                            const void* inp, const void* w, const float* mean,
                                            const float* rstd, int rows, int C) {
  engine::Tensor scratch = floats(kc::layernorm_backward_scratch_floats(rows, C), "backward_scratch");
  layernorm_backward_with(dinp, dw, db, dout, inp, w, mean, rstd, rows, C, scratch.f32());
}

void CudaShapedLayerOps::rmsnorm_backward(void* dinp, float* dw, const void* dout,
                                          const void* inp, const void* w, const float* rstd,
                                          int rows, int C) {
  engine::Tensor scratch = floats(kc::rmsnorm_backward_scratch_floats(rows, C), "backward_scratch");
  rmsnorm_backward_with(dinp, dw, dout, inp, w, rstd, rows, C, scratch.f32());
}

void CudaShapedLayerOps::attention_backward(void* dqkv, const void* dout, const void* qkv,
                                            const void* out, const float* stats, int B, int T,
                                            int C, int NH, int KVH) {
  engine::Tensor scratch = floats(kc::attention_backward_scratch_floats(B, T, NH), "backward_scratch");
  attention_backward_with(dqkv, dout, qkv, out, stats, B, T, C, NH, KVH, scratch.f32());
}

void CudaShapedLayerOps::cross_entropy_forward_backward(float* losses, engine::Tensor& logits,
                                                        const float* dlosses,
                                                        const std::int32_t* targets, int BT,
                                                        int Vlocal, int ld, int v0,
                                                        model::TpContext& tp) {
  engine::Tensor stats = floats(4 * static_cast<std::int64_t>(BT), "head_scratch");
  cross_entropy_with(losses, logits, dlosses, targets, BT, Vlocal, ld, v0, tp, stats.f32());
}

}  // namespace strata::cuda
