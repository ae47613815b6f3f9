// LayerOps: the kernels the decoder model (gpt_layer.h, gpt_head.h) is written over, ONCE for
// every backend. The CPU backend implements them with kernels/cpu in fp32 (executor/cpu),
// the CUDA backend with kernels/cuda in bf16 mixed precision (executor/cuda); each op has
// the same meaning on both, so a model written over LayerOps trains the same on either. The
// kernels are listed once, with their shapes and the memory they touch, in
// layer_kernels.def; this class adds memory, widths and the loss.
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

  // The kernels, one pure virtual each, described in layer_kernels.def.
#define STRATA_LAYER_KERNEL(name, uses, params, args, flops, ...) virtual void name params = 0;
#include "executor/model/layer_kernels.def"

  // Columns of the head's logits GEMM for a wte shard of `shard_rows` rows of which `valid`
  // are real vocabulary: the CPU backend computes only the real ones; CUDA all rows of the
  // aligned shard (unaligned logits GEMMs ran 7x slower on an H100; the padding rows are
  // zero and the loss ignores their columns).
  virtual int logits_width(int valid, int shard_rows) const = 0;

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
