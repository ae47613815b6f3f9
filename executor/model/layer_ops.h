// LayerOps: the kernels the decoder model (gpt_layer.h, gpt_head.h) is written over, ONCE for
// every backend. The CPU backend implements them with kernels/cpu in fp32 (executor/cpu),
// the CUDA backend with kernels/cuda in bf16 mixed precision (executor/cuda); each op has
// the same meaning on both, so a model written over LayerOps trains the same on either.
//
// Element types: activations, their gradients and the weights the kernels read are in the
// backend's compute dtype (dtype(): fp32 on the CPU, bf16 on CUDA), passed as void*;
// parameter gradients, LayerNorm statistics, attention statistics, losses and token ids are
// fp32 / int32 on both. Every pointer is device memory (on the CPU backend: host memory of
// the device tier). Shapes are in comments: (rows, cols), row-major.
//
// Write modes are part of each op's contract: OVERWRITTEN outputs may be uninitialised
// memory; ACCUMULATED ones (+=) are added to. Fused ops (matmul + GeLU, matmul + residual,
// residual + LayerNorm or RMSNorm, the loss with its backward) exist because the CUDA backend runs them
// as one kernel; the CPU backend composes them from its kernels in the same order of
// operations as the unfused path.
// Deliberately not here: communication (TpContext), parameters and their layout
// (param_layout.h), the order of the ops (the layers).
#pragma once

#include <cstdint>
#include <string>

#include "executor/engine/tensor.h"
#include "kernels/dtype.h"
#include "kernels/rope_frequency.h"

namespace strata::model {

class TpContext;

class LayerOps {
 public:
  virtual ~LayerOps() = default;

  virtual DType dtype() const = 0;  // the compute dtype

  // Device memory, accounted under `tag`: n elements of the compute dtype / of fp32, contents
  // undefined (written before read).
  virtual engine::Tensor activations(std::int64_t n, const std::string& tag) = 0;
  virtual engine::Tensor floats(std::int64_t n, const std::string& tag) = 0;
  // fp32 elements attention_forward keeps for the backward of one micro-batch: flash
  // attention's log-sum-exp (B, NH, T) on both backends (the CPU's tiled kernel and CUDA's;
  // cost_model's activation conventions list the same).
  virtual std::int64_t attention_stats_floats(int B, int T, int NH) const = 0;
  // Their name in the memory model's tensor lists and the allocation tags: "attn_lse".
  virtual const char* attention_stats_name() const = 0;

  // out: (rows, C) = LayerNorm(inp) with gain w, bias b; mean, rstd: (rows). OVERWRITTEN.
  virtual void layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                                 const void* w, const void* b, int rows, int C) = 0;
  // resid: (rows, C) = (y + bias) + x (bias (C) may be null); out = LayerNorm(resid).
  // OVERWRITTEN; resid may alias y.
  virtual void residual_layernorm_forward(void* resid, void* out, float* mean, float* rstd,
                                          const void* x, const void* y, const void* bias,
                                          const void* w, const void* b, int rows, int C) = 0;
  // dinp: (rows, C) ACCUMULATED; dw, db: (C) fp32 ACCUMULATED. dout, inp: (rows, C).
  virtual void layernorm_backward(void* dinp, float* dw, float* db, const void* dout,
                                  const void* inp, const void* w, const float* mean,
                                  const float* rstd, int rows, int C) = 0;

  // RMSNorm (Llama's: gain only, eps the model's). out: (rows, C); rstd: (rows). OVERWRITTEN.
  virtual void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* w, int rows,
                               int C, float eps) = 0;
  // resid: (rows, C) = (y + bias) + x (bias may be null); out = RMSNorm(resid). OVERWRITTEN;
  // resid may alias y.
  virtual void residual_rmsnorm_forward(void* resid, void* out, float* rstd, const void* x,
                                        const void* y, const void* bias, const void* w, int rows,
                                        int C, float eps) = 0;
  // dinp: (rows, C) ACCUMULATED; dw: (C) fp32 ACCUMULATED. dout, inp: (rows, C).
  virtual void rmsnorm_backward(void* dinp, float* dw, const void* dout, const void* inp,
                                const void* w, const float* rstd, int rows, int C) = 0;

  // out: (BT, OC) = inp: (BT, C) @ w: (OC, C)^T + bias: (OC) (null: none). OVERWRITTEN.
  virtual void matmul_forward(void* out, const void* inp, const void* w, const void* bias,
                              int BT, int C, int OC) = 0;
  // out = gelu(pre), pre = inp @ w^T + bias, both (BT, OC) OVERWRITTEN.
  virtual void matmul_gelu_forward(void* out, void* pre, const void* inp, const void* w,
                                   const void* bias, int BT, int C, int OC) = 0;
  // out: (BT, OC) = (inp @ w^T + bias) + residual. OVERWRITTEN; out must not alias residual.
  virtual void matmul_residual_forward(void* out, const void* inp, const void* w,
                                       const void* bias, const void* residual, int BT, int C,
                                       int OC) = 0;
  // dinp: (BT, C) = dout @ w, OVERWRITTEN (null: skipped); dw: (OC, C) += dout^T @ inp;
  // db: (OC) += column sums of dout (null: skipped). dout: (BT, OC).
  virtual void matmul_backward(void* dinp, float* dw, float* db, const void* dout,
                               const void* inp, const void* w, int BT, int C, int OC) = 0;
  // The same for out = gelu(pre) @ w^T + b seen from its input pre: dinp: (BT, C) =
  // gelu'(pre) * (dout @ w), OVERWRITTEN; dw += dout^T @ gelu_out; db += column sums.
  virtual void matmul_gelu_backward(void* dinp, float* dw, float* db, const void* dout,
                                    const void* gelu_out, const void* w, const void* pre,
                                    int BT, int C, int OC) = 0;

  // SwiGLU (kernels/cpu/swiglu.h's [gate | up] layout): out: (BT, F) = silu(gate) * up of
  // inp: (BT, 2F). OVERWRITTEN.
  virtual void swiglu_forward(void* out, const void* inp, int BT, int F) = 0;
  // The backward of out = swiglu(pre) @ w^T + b seen from pre: dinp: (BT, 2C) = swiglu'(pre)
  // applied to dout @ w, OVERWRITTEN; dw += dout^T @ swiglu_out; db += column sums (null:
  // skipped). pre: (BT, 2C). swiglu_out: (BT, C), dead after this op, is OVERWRITTEN with
  // dout @ w (the gradient at the SwiGLU output): no third tensor, so the working set is
  // dinp alone, as the memory model's list says.
  virtual void matmul_swiglu_backward(void* dinp, float* dw, float* db, const void* dout,
                                      void* swiglu_out, const void* w, const void* pre, int BT,
                                      int C, int OC) = 0;

  // Rotary position embedding (kernels/cpu/rope.h: rotate_half pairs, position t of each
  // sequence, frequencies kernels/rope_frequency.h's), in place on the first `heads` heads
  // of HS of each (B, T) row of row_stride elements: the q and k parts of a packed qkv row.
  // backward rotates by -angle.
  virtual void rope_forward(void* x, int B, int T, int heads, int HS, int row_stride,
                            const kernels::RopeFrequencies& freq) = 0;
  virtual void rope_backward(void* dx, int B, int T, int heads, int HS, int row_stride,
                             const kernels::RopeFrequencies& freq) = 0;

  // Columns of the head's logits GEMM for a wte shard of `shard_rows` rows of which `valid`
  // are real vocabulary: the CPU backend computes only the real ones; CUDA all rows of the
  // aligned shard (unaligned logits GEMMs ran 7x slower on an H100; the padding rows are
  // zero and the loss ignores their columns).
  virtual int logits_width(int valid, int shard_rows) const = 0;

  // Causal self-attention with KVH key/value heads shared by groups of NH / KVH query heads
  // (KVH = NH: multi-head attention). qkv: (B, T, C + 2 KVH HS) = [q | k | v] per row, HS =
  // C / NH; out: (B, T, C) and stats (attention_stats_floats) OVERWRITTEN.
  virtual void attention_forward(void* out, float* stats, const void* qkv, int B, int T, int C,
                                 int NH, int KVH) = 0;
  // dqkv: (B, T, C + 2 KVH HS) OVERWRITTEN from dout: (B, T, C); out and stats from the
  // forward.
  virtual void attention_backward(void* dqkv, const void* dout, const void* qkv,
                                  const void* out, const float* stats, int B, int T, int C,
                                  int NH, int KVH) = 0;

  // out: (rows, C) = (y + bias) + residual (bias may be null). OVERWRITTEN; out may alias y.
  virtual void bias_residual(void* out, const void* y, const void* bias, const void* residual,
                             int rows, int C) = 0;
  // out: (rows, C) += bias broadcast over rows.
  virtual void add_bias(void* out, const void* bias, int rows, int C) = 0;
  virtual void copy(void* dst, const void* src, std::int64_t n) = 0;
  virtual void zero(void* dst, std::int64_t n) = 0;

  // out: (B, T, C) = wte[tokens - v0] (a zero row for tokens outside [v0, v1)) + wpe (null:
  // none). OVERWRITTEN. wte: (v1 - v0, C); tokens: (B, T) int32 on the device.
  virtual void embedding_forward(void* out, const std::int32_t* tokens, const void* wte,
                                 const void* wpe, int B, int T, int C, int v0, int v1) = 0;
  // dwte += dout rows of in-slice tokens (null: skipped); dwpe: (T, C) += sum over B.
  virtual void embedding_backward(float* dwte, float* dwpe, const void* dout,
                                  const std::int32_t* tokens, int B, int T, int C, int v0,
                                  int v1) = 0;

  // Vocab-parallel cross-entropy with its backward, for the training step. logits: (BT,
  // ld) in the compute dtype, of which columns [0, Vlocal) are vocabulary ids [v0, v0 +
  // Vlocal) (columns past Vlocal are padding, ignored); the row max, the sum of exp and the
  // target's logit are summed over `tp` (a group of one: the plain cross-entropy).
  // losses: (BT) fp32 OVERWRITTEN with each token's loss; on return `logits` holds the
  // gradient (softmax - onehot) * dlosses[i] (the backend may hand back a new tensor).
  virtual void cross_entropy_forward_backward(float* losses, engine::Tensor& logits,
                                              const float* dlosses,
                                              const std::int32_t* targets, int BT, int Vlocal,
                                              int ld, int v0, TpContext& tp) = 0;
};

}  // namespace strata::model
