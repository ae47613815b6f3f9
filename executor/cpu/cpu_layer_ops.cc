// The CPU backend's model kernels (see cpu_layer_ops.h).
#include "executor/cpu/cpu_layer_ops.h"

#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "executor/model/tp_context.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"

namespace strata::cpu_backend {
namespace cpu = strata::kernels::cpu;

namespace {

class BufferStorage final : public Tensor::Storage {
 public:
  explicit BufferStorage(Buffer b) : buffer(std::move(b)) {}
  Buffer buffer;
};

float* f(void* p) { return static_cast<float*>(p); }
const float* f(const void* p) { return static_cast<const float*>(p); }

}  // namespace

Tensor tensor_of(Buffer buffer, DType dtype, MemoryTier tier) {
  void* data = buffer.data();
  const std::int64_t n = buffer.bytes() / dtype_bytes(dtype);
  return Tensor(data, n, dtype, tier, std::make_unique<BufferStorage>(std::move(buffer)));
}

Tensor CpuLayerOps::activations(std::int64_t n, const std::string& tag) {
  // LayerOps promises undefined contents (CUDA's pool hands them out as they are): every
  // kernel writes its output in full before reading it, so zeroing would be wasted stores.
  return tensor_of(alloc_->allocate_floats(MemoryTier::kDevice, n, tag, Fill::kUninitialized),
                   DType::kF32, MemoryTier::kDevice);
}

std::int64_t CpuLayerOps::attention_stats_floats(int B, int T, int NH) const {
  // The tiled attention's per-row log-sum-exp: (B, NH, T).
  return static_cast<std::int64_t>(B) * NH * T;
}

void CpuLayerOps::layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                                    const void* w, const void* b, int rows, int C) {
  cpu::layernorm_forward(f(out), mean, rstd, f(inp), f(w), f(b), rows, C);
}

void CpuLayerOps::residual_layernorm_forward(void* resid, void* out, float* mean, float* rstd,
                                             const void* x, const void* y, const void* bias,
                                             const void* w, const void* b, int rows, int C) {
  bias_residual(resid, y, bias, x, rows, C);
  cpu::layernorm_forward(f(out), mean, rstd, f(resid), f(w), f(b), rows, C);
}

void CpuLayerOps::layernorm_backward(void* dinp, float* dw, float* db, const void* dout,
                                     const void* inp, const void* w, const float* mean,
                                     const float* rstd, int rows, int C) {
  cpu::layernorm_backward(f(dinp), dw, db, f(dout), f(inp), f(w), mean, rstd, rows, C);
}

void CpuLayerOps::rmsnorm_forward(void* out, float* rstd, const void* inp, const void* w, int rows,
                                  int C, float eps) {
  cpu::rmsnorm_forward(f(out), rstd, f(inp), f(w), rows, C, eps);
}

void CpuLayerOps::residual_rmsnorm_forward(void* resid, void* out, float* rstd, const void* x,
                                           const void* y, const void* bias, const void* w,
                                           int rows, int C, float eps) {
  bias_residual(resid, y, bias, x, rows, C);
  cpu::rmsnorm_forward(f(out), rstd, f(resid), f(w), rows, C, eps);
}

void CpuLayerOps::rmsnorm_backward(void* dinp, float* dw, const void* dout, const void* inp,
                                   const void* w, const float* rstd, int rows, int C) {
  cpu::rmsnorm_backward(f(dinp), dw, f(dout), f(inp), f(w), rstd, rows, C);
}

void CpuLayerOps::matmul_forward(void* out, const void* inp, const void* w, const void* bias,
                                 int BT, int C, int OC) {
  cpu::matmul_forward(f(out), f(inp), f(w), f(bias), BT, C, OC);
}

void CpuLayerOps::matmul_gelu_forward(void* out, void* pre, const void* inp, const void* w,
                                      const void* bias, int BT, int C, int OC) {
  cpu::matmul_forward(f(pre), f(inp), f(w), f(bias), BT, C, OC);
  cpu::gelu_forward(f(out), f(pre), static_cast<std::int64_t>(BT) * OC);
}

void CpuLayerOps::matmul_residual_forward(void* out, const void* inp, const void* w,
                                          const void* bias, const void* residual, int BT, int C,
                                          int OC) {
  cpu::matmul_forward(f(out), f(inp), f(w), f(bias), BT, C, OC);
  cpu::residual_forward(f(out), f(out), f(residual), static_cast<std::int64_t>(BT) * OC);
}

void CpuLayerOps::matmul_backward(void* dinp, float* dw, float* db, const void* dout,
                                  const void* inp, const void* w, int BT, int C, int OC) {
  cpu::matmul_backward(f(dinp), dw, db, f(dout), f(inp), f(w), BT, C, OC,
                       cpu::InputGrad::kOverwrite);
}

void CpuLayerOps::matmul_gelu_backward(void* dinp, float* dw, float* db, const void* dout,
                                       const void* gelu_out, const void* w, const void* pre,
                                       int BT, int C, int OC) {
  // The gradient at gelu's output goes straight into dinp and is turned into the one at its
  // input in place: no scratch, as CUDA's fused epilogue.
  cpu::matmul_backward(f(dinp), dw, db, f(dout), f(gelu_out), f(w), BT, C, OC,
                       cpu::InputGrad::kOverwrite);
  cpu::gelu_backward_in_place(f(dinp), f(pre), static_cast<std::int64_t>(BT) * C);
}

void CpuLayerOps::swiglu_forward(void* out, const void* inp, int BT, int F) {
  cpu::swiglu_forward(f(out), f(inp), BT, F);
}

void CpuLayerOps::matmul_swiglu_backward(void* dinp, float* dw, float* db, const void* dout,
                                         void* swiglu_out, const void* w, const void* pre,
                                         int BT, int C, int OC) {
  // The weight gradient reads swiglu_out first; then the gradient at the SwiGLU output takes
  // its place (the contract lets it go), and the kernel, which accumulates, turns it into the
  // one at pre in the zeroed dinp.
  cpu::matmul_backward(nullptr, dw, db, f(dout), f(swiglu_out), f(w), BT, C, OC);
  cpu::matmul_backward(f(swiglu_out), nullptr, nullptr, f(dout), f(swiglu_out), f(w), BT, C, OC,
                       cpu::InputGrad::kOverwrite);
  cpu::zero(f(dinp), static_cast<std::int64_t>(BT) * 2 * C);
  cpu::swiglu_backward(f(dinp), f(pre), f(swiglu_out), BT, C);
}

void CpuLayerOps::rope_forward(void* x, int B, int T, int heads, int HS, int row_stride,
                               const kernels::RopeFrequencies& freq) {
  cpu::rope_forward(f(x), B, T, heads, HS, row_stride, /*pos_offset=*/0, freq);
}

void CpuLayerOps::rope_backward(void* dx, int B, int T, int heads, int HS, int row_stride,
                                const kernels::RopeFrequencies& freq) {
  cpu::rope_backward(f(dx), B, T, heads, HS, row_stride, /*pos_offset=*/0, freq);
}

void CpuLayerOps::attention_forward(void* out, float* stats, const void* qkv, int B, int T,
                                    int C, int NH, int KVH) {
  cpu::flash_attention_forward(f(out), stats, f(qkv), B, T, C, NH, KVH);
}

void CpuLayerOps::attention_backward(void* dqkv, const void* dout, const void* qkv,
                                     const void* out, const float* stats, int B, int T, int C,
                                     int NH, int KVH) {
  Buffer scratch = alloc_->allocate_floats(
      MemoryTier::kDevice, cpu::flash_attention_backward_scratch_floats(B, T, NH),
      "backward_scratch");
  const std::int64_t width = C + 2 * static_cast<std::int64_t>(KVH) * (C / NH);
  cpu::zero(f(dqkv), static_cast<std::int64_t>(B) * T * width);
  cpu::flash_attention_backward(f(dqkv), scratch.f32(), f(dout), f(qkv), f(out), stats, B, T, C,
                                NH, KVH);
}

void CpuLayerOps::bias_residual(void* out, const void* y, const void* bias, const void* residual,
                                int rows, int C) {
  cpu::bias_residual_forward(f(out), f(y), f(bias), f(residual), rows, C);
}

void CpuLayerOps::copy(void* dst, const void* src, std::int64_t n) { cpu::copy(f(dst), f(src), n); }

void CpuLayerOps::zero(void* dst, std::int64_t n) { cpu::zero(f(dst), n); }

void CpuLayerOps::embedding_forward(void* out, const std::int32_t* tokens, const void* wte,
                                    const void* wpe, int B, int T, int C, int v0, int v1) {
  cpu::embedding_forward(f(out), tokens, f(wte), f(wpe), B, T, C, v0, v1);
}

void CpuLayerOps::embedding_backward(float* dwte, float* dwpe, const void* dout,
                                     const std::int32_t* tokens, int B, int T, int C, int v0,
                                     int v1) {
  cpu::embedding_backward(dwte, dwpe, f(dout), tokens, B, T, C, v0, v1);
}

void CpuLayerOps::cross_entropy_forward_backward(float* losses, Tensor& logits,
                                                 const float* dlosses,
                                                 const std::int32_t* targets, int BT, int Vlocal,
                                                 int ld, int v0, model::TpContext& tp) {
  if (ld != Vlocal) {
    throw std::logic_error(fmt::format("cpu cross-entropy: row stride {} != {} columns", ld, Vlocal));
  }
  // Vocab-parallel: the global row max, then the global sum of exp and the target's logit (0
  // on ranks whose shard does not hold it), each summed over TP.
  Buffer stats = alloc_->allocate_floats(MemoryTier::kDevice, 4 * static_cast<std::int64_t>(BT),
                                         "head_scratch");
  float* row_max = stats.f32();
  float* row_sum = row_max + BT;
  float* target_logit = row_sum + BT;  // contiguous with row_sum: one all-reduce for both
  float* row_lse = target_logit + BT;
  const float* z = logits.f32();
  if (Vlocal > 0) {
    cpu::vocab_parallel_row_max(row_max, z, BT, Vlocal);
  } else {
    for (int i = 0; i < BT; ++i) row_max[i] = -3.0e38f;
  }
  tp.all_reduce_max_f32(row_max, BT);
  if (Vlocal > 0) {
    cpu::vocab_parallel_sum_exp(row_sum, z, row_max, BT, Vlocal);
    cpu::vocab_parallel_target_logit(target_logit, z, targets, BT, Vlocal, v0);
  }
  tp.all_reduce_sum_f32(row_sum, 2 * static_cast<std::int64_t>(BT));
  cpu::vocab_parallel_loss(losses, row_lse, row_max, row_sum, target_logit, BT);
  // Zero-filled: the kernel accumulates into dlogits (activations() hands out what the block
  // held).
  Tensor dlogits = tensor_of(alloc_->allocate_floats(MemoryTier::kDevice,
                                                     static_cast<std::int64_t>(BT) * Vlocal,
                                                     "dlogits", Fill::kZero),
                             DType::kF32, MemoryTier::kDevice);
  if (Vlocal > 0) {
    cpu::vocab_parallel_cross_entropy_backward(dlogits.f32(), dlosses, z, row_lse, targets, BT,
                                               Vlocal, v0);
  }
  logits = std::move(dlogits);
}

}  // namespace strata::cpu_backend
