// The GPT model's pieces on one GPU in bf16 (the CUDA twin of executor/model/gpt_layer.h and
// gpt_head.h at t = 1, without sequence parallelism): the token + position embedding, the
// pre-LayerNorm transformer layer, and the head (final LayerNorm, logits against the tied
// wte, fused cross-entropy), forward and backward, through kernels/cuda.
//
// Layer forward, per micro-batch (x the layer input, y its output, both (BT, C) bf16):
//   ln1 = LN(x); qkv = ln1 Wqkv + b; att = flash_attention(qkv); r = x + att Wproj + b
//   (fused with LN2: ln2 = LN(r)); h = gelu(ln2 Wfc + b) (epilogue-fused, pre-GeLU kept);
//   y = r + h Wfc2 + b.
// Backward walks the same ops in reverse. The residual stream's gradient lives in ONE buffer:
// it enters as dy, the LayerNorm backwards add into it (LN2 makes it dr, LN1 makes it dx), so
// no residual-gradient copies. Fresh activation gradients use the kernels' overwrite modes
// (no zeroed buffers); weight gradients accumulate in fp32 across micro-batches.
// Saved tensors are tagged "act/<name>" like the CPU backend's (flash attention keeps only
// the log-sum-exp, no (T, T) probabilities), temporaries "forward_scratch" and
// "backward_scratch". Full recomputation frees everything but the layer input after the
// forward and reruns layer_forward before the backward; selective recomputation keeps
// everything (its target, the attention probabilities, is never stored here).
// The head runs the loss AND the logits' backward inside its forward (one micro-batch's
// (BT, V) logits live at a time, as on the CPU backend), keeping only the gradient at the
// final LayerNorm's output; its backward is the LayerNorm's.
// Deliberately not here: tensor/sequence parallelism, dropout, the schedule.
#pragma once

#include <cstdint>

#include "executor/cuda/device_pool.h"
#include "executor/model/gpt_layer.h"
#include "kernels/cuda/common.h"
#include "kernels/cuda/cuda_resources.h"

namespace strata::cuda {

using kernels::cuda::bf16;

// Vp: the vocabulary padded to a multiple of kVocabAlignment: wte holds Vp rows (the last
// Vp - V zero, never trained: their logits are 0, the loss skips them, their gradient is 0)
// so the logits matmuls see 16-byte aligned rows; unaligned, cuBLASLt's kernels for them
// measured 7x slower on an H100 (tools/bench/gpt_ops_bench.cc: 99 vs 782 TFLOP/s).
inline constexpr int kVocabAlignment = 128;

struct GptShape {
  int B = 1, T = 1, C = 1, NH = 1, F = 1, V = 1, Vp = 1;
  int BT() const { return B * T; }
  std::int64_t act() const { return static_cast<std::int64_t>(B) * T * C; }  // (B, T, C)
};

// What every op needs: the pool for activations, the cuBLASLt handle, the compute stream,
// and the scratch buffers of the LayerNorm and attention backwards (sized for the shape).
class GptKernels {
 public:
  GptKernels(const GptShape& shape, DevicePool& pool, cudaStream_t stream);

  const GptShape& shape() const { return shape_; }
  DevicePool& pool() const { return *pool_; }
  cudaStream_t stream() const { return stream_; }
  const kernels::cuda::CublasLtHandle& lt() const { return lt_; }
  float* ln_scratch() const { return ln_scratch_.as<float>(); }
  float* attention_scratch() const { return attention_scratch_.as<float>(); }

  // Blocks for activations: bf16 (n elements) / fp32, uninitialised (written before read).
  DeviceBlock bf16s(std::int64_t n, const std::string& tag) const;
  DeviceBlock floats(std::int64_t n, const std::string& tag) const;

 private:
  GptShape shape_;
  DevicePool* pool_;
  cudaStream_t stream_;
  kernels::cuda::CublasLtHandle lt_;
  DeviceBlock ln_scratch_, attention_scratch_;
};

struct LayerSaved {
  DeviceBlock ln1_out, ln1_mean, ln1_rstd;  // (BT, C) bf16, (BT), (BT)
  DeviceBlock qkv;                          // (BT, 3C)
  DeviceBlock att, lse;                     // (BT, C), (B, NH, T) fp32
  DeviceBlock resid;                        // (BT, C): r = x + attention branch
  DeviceBlock ln2_out, ln2_mean, ln2_rstd;  // (BT, C), (BT), (BT)
  DeviceBlock pre_gelu, gelu;               // (BT, F) each
  bool empty() const { return ln1_out.empty(); }
};

using LayerWeights = model::LayerTensors<const bf16*>;
using LayerGrads = model::LayerTensors<float*>;

// y: (BT, C) written; saved: filled (its old blocks released).
void layer_forward(const GptKernels& k, const LayerWeights& w, const bf16* x, bf16* y,
                   LayerSaved& saved);

// dres: (BT, C) the gradient at y on entry, the gradient at x on return (in place).
// g: ACCUMULATED. Releases what `saved` holds.
void layer_backward(const GptKernels& k, const LayerWeights& w, const LayerGrads& g,
                    const bf16* x, LayerSaved& saved, bf16* dres);

// x: (BT, C) = wte[tokens] + wpe; tokens: (B, T) int32 on the device.
void embedding_forward(const GptKernels& k, const bf16* wte, const bf16* wpe,
                       const std::int32_t* tokens, bf16* x);
// ACCUMULATES dwte, dwpe from dx: (BT, C).
void embedding_backward(const GptKernels& k, float* dwte, float* dwpe, const bf16* dx,
                        const std::int32_t* tokens);

struct HeadSaved {
  DeviceBlock lnf_mean, lnf_rstd;  // (BT)
  DeviceBlock lnf_dout;            // (BT, C): gradient at the final LayerNorm's output
};

// x: (BT, C) the last layer's output; targets: (B, T) int32 on the device; dlosses: (BT)
// fp32, each token's loss gradient (1 / tokens of the global batch). Writes the BT per-token
// losses to `losses` (device, fp32) and ACCUMULATES dwte.
void head_forward(const GptKernels& k, const bf16* x, const bf16* lnf_w, const bf16* lnf_b,
                  const bf16* wte, float* dwte, const std::int32_t* targets,
                  const float* dlosses, float* losses, HeadSaved& saved);

// dx: (BT, C) OVERWRITTEN with the gradient at x; dlnf_w, dlnf_b ACCUMULATED. Releases saved.
void head_backward(const GptKernels& k, const bf16* x, const bf16* lnf_w, float* dlnf_w,
                   float* dlnf_b, HeadSaved& saved, bf16* dx);

}  // namespace strata::cuda
