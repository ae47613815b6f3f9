// The one description of a model's parameter tensors, derived from its ModelSpec: for each
// tensor of a transformer layer, of the embedding, of the final norm and of an untied output
// layer, its name, its global shape, how tensor parallelism splits it, which GEMM it feeds
// and how it is initialised. The parameter layout (param_layout.h), the parameter counts
// (ModelSpec), the GEMM shapes and FLOPs of the time model (compute_model.h, step_report.h)
// and the activation sizes read it, so a family's choice is made here once.
//
// Tensor parallelism (Megatron-LM, Shoeybi et al. 2019; GQA as in Megatron-Core):
//   Q (and GPT's fused QKV) column-parallel: whole heads per rank;
//   K and V column-parallel by KV heads when t <= kv_heads; when t > kv_heads (t a multiple
//   of it) each rank holds the one KV head its query heads use, replicated t / kv_heads times;
//   SwiGLU's gate and up column-parallel together (one fused tensor of two parts, so a rank's
//   gate rows and up rows are the same channels); the output projection and fc2 row-parallel;
//   norms and the biases of row-parallel layers replicated; the token embedding and an untied
//   output layer vocab-parallel (ceil(V/t) rows a rank, padded: vocab_shard_rows).
// Deliberately not here: offsets inside a flat buffer (param_layout.h), which TP degrees are
// legal (partition.h: tensor_parallel_violation), memory and time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "cost_model/specs/model_spec.h"

namespace strata {

enum class InitKind { kNormal, kOnes, kZeros };

// Codes that key each tensor's random stream (see param_init.h); stable across plans: new
// tensors take new codes at the end.
enum TensorCode : int {
  kLn1W = 1, kLn1B, kQkvW, kQkvB, kProjW, kProjB, kLn2W, kLn2B, kFcW, kFcB, kFc2W, kFc2B,
  kWte, kWpe, kLnfW, kLnfB,
  kQW, kQB, kKvW, kKvB, kLmHead,
};

// One TP rank's view: its degree, its rank, and the wte/lm_head shard's row alignment
// (partition.h: vocab_row_alignment).
struct TpShape {
  std::int64_t tp = 1;
  std::int64_t tp_rank = 0;
  std::int64_t vocab_row_alignment = 1;
};

enum class TpSplit {
  kReplicated,  // whole on every TP rank
  kRows,        // column-parallel: each part's rows split by t
  kCols,        // row-parallel: the input columns split by t
  kKvRows,      // K/V rows: split by KV heads, or one KV head per rank when t > kv_heads
  kVocabRows,   // vocab-parallel rows, vocab_shard_rows(t) a rank
};

// The GEMM of a layer a weight (or its bias) belongs to, in the order of a layer's forward.
enum class LayerGemm { kNone, kQkv, kProj, kFc1, kFc2 };

struct TensorSpec {
  const char* name = "";       // "qkv_w", "wte", ... (a literal: no allocation)
  int code = 0;                // TensorCode
  std::int64_t rows = 0;       // global shape (rows, cols); a vector is (rows, 1)
  std::int64_t cols = 1;
  std::int64_t parts = 1;      // equal blocks of rows split separately (QKV: 3, gate|up: 2, K|V: 2)
  TpSplit split = TpSplit::kReplicated;
  LayerGemm gemm = LayerGemm::kNone;
  InitKind init = InitKind::kZeros;
  bool residual_scaled = false;  // normal(0, 0.02 / sqrt(2 L)): projections into the residual
  bool is_weight() const { return cols > 1; }
};

// The tensors of one unit in a fixed array: the planner asks for these counts for every
// candidate, and a heap allocation each time made `strata plan` 40% slower.
class TensorSpecs {
 public:
  static constexpr std::size_t kCapacity = 16;  // GPT-2's layer has 12
  void push_back(const TensorSpec& spec);       // std::logic_error past kCapacity
  const TensorSpec* begin() const { return items_.data(); }
  const TensorSpec* end() const { return items_.data() + size_; }
  std::size_t size() const { return size_; }
  const TensorSpec& operator[](std::size_t i) const { return items_[i]; }

 private:
  std::array<TensorSpec, kCapacity> items_{};
  std::size_t size_ = 0;
};

// A tensor on one TP rank: local (rows, cols), and how a local row maps to the global tensor
// (param_layout.h's ParamSegment: part r / part_rows starts at global row
// part * part_stride + row_offset).
struct LocalShape {
  std::int64_t rows = 0, cols = 1;
  std::int64_t part_rows = 0, part_stride = 0, row_offset = 0, col_offset = 0;
  std::int64_t valid_rows = 0;  // rows >= valid_rows are vocab padding
  std::int64_t count() const { return rows * cols; }
};

// Rows of the vocabulary a TP rank holds: ceil(V / t), rounded up to a multiple of
// `row_alignment` (the CUDA backend's 128, partition.h); the padding rows stay zero.
std::int64_t vocab_shard_rows(const ModelSpec& model, std::int64_t tp, std::int64_t row_alignment = 1);
// KV heads on one TP rank: kv_heads / t, or 1 when t > kv_heads (replicated).
std::int64_t kv_heads_per_rank(const ModelSpec& model, std::int64_t tp);
// TP ranks holding each KV head: t / kv_heads when t > kv_heads (consecutive TP ranks share
// one: local_shape's kKvRows), else 1. Their K|V gradients are partial (each rank's query
// heads only) and summed over those ranks.
std::int64_t kv_head_copies(const ModelSpec& model, std::int64_t tp);
// Elements of a layer's K|V tensors (kKvRows: weight and bias) on one TP rank when they are
// replicated (kv_head_copies > 1), else 0: what the copies' gradient sum moves.
std::int64_t replicated_kv_params_per_tp_rank(const ModelSpec& model, std::int64_t tp);

// The tensors, in the order of their flat buffers (param_layout.h):
//   layer: [ln1_w ln1_b] qkv_w qkv_b | q_w q_b kv_w kv_b, proj_w proj_b, ln2_w ln2_b, fc_w
//          fc_b, fc2_w fc2_b. GPT-2 is the first (12 tensors); biases and LayerNorm biases
//          drop with biases = false and with RMSNorm; with kv_heads < heads Q and K|V are two
//          tensors (their heads split differently); SwiGLU's fc_w is gate|up (2 f, h).
//   embedding: wte (V, h) [wpe (s, h) with learned positions]
//   final norm: lnf_w [lnf_b]
//   output (untied only): lm_head (V, h); empty when tied.
TensorSpecs layer_tensor_specs(const ModelSpec& model);
TensorSpecs embedding_tensor_specs(const ModelSpec& model);
TensorSpecs final_norm_tensor_specs(const ModelSpec& model);
TensorSpecs output_tensor_specs(const ModelSpec& model);

LocalShape local_shape(const TensorSpec& spec, const ModelSpec& model, const TpShape& tp);
// Elements of `specs` on one TP rank (padding rows included).
std::int64_t local_param_count(const TensorSpecs& specs, const ModelSpec& model,
                               const TpShape& tp);

// The four GEMMs of a layer on one TP rank, from the weights' local shapes: out x in.
struct LayerGemmShapes {
  std::int64_t qkv_out = 0, qkv_in = 0;    // Q, K, V rows of the rank (h/t + 2 kv_local d)
  std::int64_t proj_out = 0, proj_in = 0;  // h x h/t
  std::int64_t fc1_out = 0, fc1_in = 0;    // f/t (GeLU) or 2 f/t (SwiGLU gate|up) x h
  std::int64_t fc2_out = 0, fc2_in = 0;    // h x f/t
};
LayerGemmShapes layer_gemm_shapes(const ModelSpec& model, std::int64_t tp);

// Weights of one layer that enter a GEMM (no biases, no norms), at t = 1: the N of
// "6 N FLOPs a token" for the layers. GPT-2: 4h^2 + 2hf; Llama: 2h^2 + 2 h kv d + 3hf.
std::int64_t layer_matmul_params(const ModelSpec& model);

// Forward FLOPs of one layer for one token (Kaplan et al. 2020, Table 1; Megatron's and
// PaLM's counts): 2 per GEMM weight, plus the attention scores and the weighted values,
// 2 s (heads d) each, as full (not causal) s x s products the way the published formulas
// count them: 2 layer_matmul_params + 4 s h. The GQA K/V sharing changes the weights only.
double layer_forward_flops_per_token(const ModelSpec& model);
// Forward FLOPs of the output layer (logits) for one token: 2 V h, tied or not.
double logits_forward_flops_per_token(const ModelSpec& model);

}  // namespace strata
