// The CUDA backend's model kernels (see cuda_layer_ops.h).
#include "executor/cuda/cuda_layer_ops.h"

#include <functional>
#include <utility>

#include "executor/cuda/system_error.h"
#include "executor/model/tp_context.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/swiglu.h"
#include "kernels/cuda/vocab_parallel_loss.h"

namespace strata::cuda {
namespace kc = kernels::cuda;
using kc::bf16;

namespace {

class BlockStorage final : public Tensor::Storage {
 public:
  explicit BlockStorage(DeviceBlock b) : block(std::move(b)) {}
  DeviceBlock block;
};

bf16* h(void* p) { return static_cast<bf16*>(p); }
const bf16* h(const void* p) { return static_cast<const bf16*>(p); }

}  // namespace

Tensor tensor_of(DeviceBlock block, DType dtype) {
  void* data = block.data();
  const std::int64_t n = block.bytes() / dtype_bytes(dtype);
  return Tensor(data, n, dtype, MemoryTier::kDevice, std::make_unique<BlockStorage>(std::move(block)));
}

CudaLayerOps::CudaLayerOps(DevicePool& pool, cudaStream_t stream, kc::AttentionMode attention)
    : pool_(&pool),
      stream_(stream),
      lt_(as_system_error([] { return kc::CublasLtHandle::create(); })),
      attention_(as_system_error([attention] { return kc::AttentionLauncher(attention); })) {}

void CudaLayerOps::trace_kernels(std::function<int()> stamp) { stamp_ = std::move(stamp); }

template <class Body>
void CudaLayerOps::timed(const char* name, Body&& body) {
  // An op called inside another (a copy inside a fused op) is part of the outer one's span.
  if (!stamp_ || depth_ > 0) {
    body();
    return;
  }
  ++depth_;
  const int start = stamp_();
  try {
    body();
  } catch (...) {
    --depth_;
    throw;
  }
  --depth_;
  spans_.push_back({name, start, stamp_()});
}

Tensor CudaLayerOps::block(std::int64_t bytes, DType dtype, const std::string& tag) {
  return tensor_of(pool_->allocate_uninitialized(bytes, tag), dtype);
}

void CudaLayerOps::layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                                     const void* w, const void* b, int rows, int C) {
  timed("layernorm_forward", [&] {
    kc::layernorm_forward(h(out), mean, rstd, h(inp), h(w), h(b), rows, C, stream_);
  });
}

void CudaLayerOps::residual_layernorm_forward(void* resid, void* out, float* mean, float* rstd,
                                              const void* x, const void* y, const void* bias,
                                              const void* w, const void* b, int rows, int C) {
  timed("residual_layernorm_forward", [&] {
    const void* sum_with = y;
    if (bias != nullptr) {  // (y + bias) first, as the CPU backend rounds it
      if (resid != y) copy(resid, y, static_cast<std::int64_t>(rows) * C);
      kc::add_bias(h(resid), h(bias), rows, C, stream_);
      sum_with = resid;
    }
    kc::fused_residual_layernorm_forward(h(resid), h(out), mean, rstd, h(x), h(sum_with), h(w),
                                         h(b), rows, C, stream_);
  });
}

void CudaLayerOps::layernorm_backward_with(void* dinp, float* dw, float* db, const void* dout,
                                           const void* inp, const void* w, const float* mean,
                                           const float* rstd, int rows, int C, float* scratch) {
  timed("layernorm_backward", [&] {
    kc::layernorm_backward(h(dinp), dw, db, h(dout), h(inp), h(w), mean, rstd, rows, C, scratch,
                           stream_);
  });
}

void CudaLayerOps::rmsnorm_forward(void* out, float* rstd, const void* inp, const void* w,
                                   int rows, int C, float eps) {
  timed("rmsnorm_forward", [&] {
    kc::rmsnorm_forward(h(out), rstd, h(inp), h(w), rows, C, eps, stream_);
  });
}

void CudaLayerOps::residual_rmsnorm_forward(void* resid, void* out, float* rstd, const void* x,
                                            const void* y, const void* bias, const void* w,
                                            int rows, int C, float eps) {
  timed("residual_rmsnorm_forward", [&] {
    const void* sum_with = y;
    if (bias != nullptr) {  // (y + bias) first, as the CPU backend rounds it
      if (resid != y) copy(resid, y, static_cast<std::int64_t>(rows) * C);
      kc::add_bias(h(resid), h(bias), rows, C, stream_);
      sum_with = resid;
    }
    kc::fused_residual_rmsnorm_forward(h(resid), h(out), rstd, h(x), h(sum_with), h(w), rows, C,
                                       eps, stream_);
  });
}

void CudaLayerOps::rmsnorm_backward_with(void* dinp, float* dw, const void* dout,
                                         const void* inp, const void* w, const float* rstd,
                                         int rows, int C, float* scratch) {
  timed("rmsnorm_backward", [&] {
    kc::rmsnorm_backward(h(dinp), dw, h(dout), h(inp), h(w), rstd, rows, C, scratch, stream_);
  });
}

void CudaLayerOps::swiglu_forward(void* out, const void* inp, int BT, int F) {
  timed("swiglu_forward", [&] {
    kc::swiglu_forward(h(out), h(inp), BT, F, stream_);
  });
}

void CudaLayerOps::matmul_swiglu_backward(void* dinp, float* dw, float* db, const void* dout,
                                          void* swiglu_out, const void* w, const void* pre,
                                          int BT, int C, int OC) {
  timed("matmul_swiglu_backward", [&] {
    // The weight gradient reads swiglu_out first (stream order); the gradient at the SwiGLU
    // output then takes its place, and the SwiGLU backward overwrites dinp from it.
    kc::matmul_backward(nullptr, dw, db, h(dout), h(swiglu_out), h(w), BT, C, OC, lt_, stream_,
                        /*overwrite_dinp=*/true);
    kc::matmul_backward(h(swiglu_out), nullptr, nullptr, h(dout), h(swiglu_out), h(w), BT, C, OC,
                        lt_, stream_, /*overwrite_dinp=*/true);
    kc::swiglu_backward(h(dinp), h(pre), h(swiglu_out), BT, C, stream_, /*accumulate=*/false);
  });
}

void CudaLayerOps::rope_forward(void* x, int B, int T, int heads, int HS, int row_stride,
                                const kernels::RopeFrequencies& freq) {
  timed("rope_forward", [&] {
    kc::rope_forward(h(x), B, T, heads, HS, row_stride, /*pos_offset=*/0, freq, stream_);
  });
}

void CudaLayerOps::rope_backward(void* dx, int B, int T, int heads, int HS, int row_stride,
                                 const kernels::RopeFrequencies& freq) {
  timed("rope_backward", [&] {
    kc::rope_backward(h(dx), B, T, heads, HS, row_stride, /*pos_offset=*/0, freq, stream_);
  });
}

void CudaLayerOps::matmul_forward(void* out, const void* inp, const void* w, const void* bias,
                                  int BT, int C, int OC) {
  timed("matmul_forward", [&] {
    kc::matmul_forward(h(out), h(inp), h(w), h(bias), BT, C, OC, lt_, stream_);
  });
}

void CudaLayerOps::matmul_gelu_forward(void* out, void* pre, const void* inp, const void* w,
                                       const void* bias, int BT, int C, int OC) {
  timed("matmul_gelu_forward", [&] {
    kc::matmul_forward(h(out), h(inp), h(w), h(bias), BT, C, OC, lt_, stream_,
                       kc::GemmActivation::kGelu, h(pre));
  });
}

void CudaLayerOps::matmul_residual_forward(void* out, const void* inp, const void* w,
                                           const void* bias, const void* residual, int BT, int C,
                                           int OC) {
  timed("matmul_residual_forward", [&] {
    kc::matmul_forward_residual(h(out), h(inp), h(w), h(bias), h(residual), BT, C, OC, lt_,
                                stream_);
  });
}

void CudaLayerOps::matmul_backward(void* dinp, float* dw, float* db, const void* dout,
                                   const void* inp, const void* w, int BT, int C, int OC) {
  timed("matmul_backward", [&] {
    kc::matmul_backward(h(dinp), dw, db, h(dout), h(inp), h(w), BT, C, OC, lt_, stream_,
                        /*overwrite_dinp=*/true);
  });
}

void CudaLayerOps::matmul_gelu_backward(void* dinp, float* dw, float* db, const void* dout,
                                        const void* gelu_out, const void* w, const void* pre,
                                        int BT, int C, int OC) {
  timed("matmul_gelu_backward", [&] {
    kc::matmul_backward_dgelu(h(dinp), dw, db, h(dout), h(gelu_out), h(w), h(pre), BT, C, OC, lt_,
                              stream_);
  });
}

void CudaLayerOps::attention_forward(void* out, float* stats, const void* qkv, int B, int T,
                                     int C, int NH, int KVH) {
  timed("attention_forward", [&] {
    attention_.forward(h(out), stats, h(qkv), B, T, C, NH, KVH, stream_);
  });
}

void CudaLayerOps::attention_backward_with(void* dqkv, const void* dout, const void* qkv,
                                           const void* out, const float* stats, int B, int T,
                                           int C, int NH, int KVH, float* scratch) {
  timed("attention_backward", [&] {
    attention_.backward(h(dqkv), scratch, h(dout), h(qkv), h(out), stats, B, T, C, NH, KVH,
                        stream_);
  });
}

void CudaLayerOps::bias_residual(void* out, const void* y, const void* bias, const void* residual,
                                 int rows, int C) {
  timed("bias_residual", [&] {
    const std::int64_t n = static_cast<std::int64_t>(rows) * C;
    if (out != y) copy(out, y, n);
    if (bias != nullptr) kc::add_bias(h(out), h(bias), rows, C, stream_);
    kc::residual_forward(h(out), h(out), h(residual), n, stream_);
  });
}

void CudaLayerOps::copy(void* dst, const void* src, std::int64_t n) {
  timed("copy", [&] {
    as_system_error([&] {
      CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * 2,
                                 cudaMemcpyDeviceToDevice, stream_));
    });
  });
}

void CudaLayerOps::zero(void* dst, std::int64_t n) {
  timed("zero", [&] {
    as_system_error([&] {
      CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<std::size_t>(n) * 2, stream_));
    });
  });
}

void CudaLayerOps::embedding_forward(void* out, const std::int32_t* tokens, const void* wte,
                                     const void* wpe, int B, int T, int C, int v0, int v1) {
  timed("embedding_forward", [&] {
    kc::embedding_forward(h(out), tokens, h(wte), h(wpe), B, T, C, v0, v1, stream_);
  });
}

void CudaLayerOps::embedding_backward(float* dwte, float* dwpe, const void* dout,
                                      const std::int32_t* tokens, int B, int T, int C, int v0,
                                      int v1) {
  timed("embedding_backward", [&] {
    kc::embedding_backward(dwte, dwpe, h(dout), tokens, B, T, C, v0, v1, stream_);
  });
}

void CudaLayerOps::cross_entropy_with(float* losses, Tensor& logits, const float* dlosses,
                                      const std::int32_t* targets, int BT, int Vlocal, int ld,
                                      int v0, model::TpContext& tp, float* stats) {
  timed("cross_entropy", [&] {
    float* row_max = stats;
    float* row_sum = row_max + BT;
    float* target_logit = row_sum + BT;  // contiguous with row_sum: one all-reduce for both
    float* row_lse = target_logit + BT;
    if (tp.size() == 1) {
      // The whole vocabulary on this rank: one pass over the logits, loss and gradient.
      kc::cross_entropy_forward_backward(losses, row_max, row_lse, logits.as<bf16>(), dlosses,
                                         targets, BT, Vlocal, stream_, ld);
      return;
    }
    kc::vocab_parallel_row_max(row_max, logits.as<bf16>(), BT, Vlocal, ld, stream_);
    tp.all_reduce_max_f32(row_max, BT);
    kc::vocab_parallel_sum_exp(row_sum, logits.as<bf16>(), row_max, BT, Vlocal, ld, stream_);
    kc::vocab_parallel_target_logit(target_logit, logits.as<bf16>(), targets, BT, Vlocal, ld, v0,
                                    stream_);
    tp.all_reduce_sum_f32(row_sum, 2 * static_cast<std::int64_t>(BT));
    kc::vocab_parallel_loss(losses, row_lse, row_max, row_sum, target_logit, BT, stream_);
    kc::vocab_parallel_cross_entropy_backward(logits.as<bf16>(), dlosses, row_lse, targets, BT,
                                              Vlocal, ld, v0, stream_);
  });
}

}  // namespace strata::cuda
