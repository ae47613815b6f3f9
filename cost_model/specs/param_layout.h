// Flat parameter buffers of the model on one tensor-parallel rank: which tensors a unit
// holds (one unit = one contiguous fp32 buffer: a transformer layer, the embedding, the
// tied output-embedding copy, the untied output layer or the final norm), at which offsets,
// with their local shapes, how local elements map to the single-rank model's global indices
// (for init), and whether the tensor is replicated over the TP group (for a global grad norm
// that counts every parameter once). ZeRO partitions these units; gradients use the same
// layout. Which tensors, their shapes and TP splits come from layer_tensors.h; this file
// only lays them out.
// Deliberately not here: memory, communication, the math of the layers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/specs/layer_tensors.h"
#include "cost_model/specs/model_spec.h"

namespace strata {

struct ParamSegment {
  std::string name;            // "qkv_w", "wte", ...
  int code = 0;                // TensorCode
  std::int64_t layer = -1;     // global layer, -1 for non-layer tensors
  std::int64_t offset = 0;     // in floats, within the unit's flat buffer
  std::int64_t rows = 0;       // local shape (rows, cols); a vector is (rows, 1)
  std::int64_t cols = 1;
  // Local element (r, c) is global element (part * part_stride + row_offset + i) * global_cols
  // + col_offset + c, where part = r / part_rows, i = r % part_rows.
  std::int64_t part_rows = 0;
  std::int64_t part_stride = 0;
  std::int64_t row_offset = 0;
  std::int64_t col_offset = 0;
  std::int64_t global_cols = 1;
  std::int64_t valid_rows = 0;  // rows >= valid_rows are padding (vocab shard), stay zero
  InitKind init = InitKind::kZeros;
  double init_std = 0;
  bool tp_replicated = false;   // identical on every TP rank
  // TP ranks holding this same shard: t / kv_heads for K|V heads replicated over TP
  // (layer_tensors.h: kv_head_copies; consecutive TP ranks), else 1.
  std::int64_t tp_copies = 1;
  // Whether TP rank `tp_rank` holds the copy that counts: the one a gradient norm sums and
  // a weights file takes (TP rank 0 of a replicated tensor, the first rank of each group of
  // KV copies, every rank of a split tensor).
  bool counted_on(std::int64_t tp_rank) const {
    return tp_replicated ? tp_rank == 0 : tp_rank % tp_copies == 0;
  }
  std::int64_t count() const { return rows * cols; }
  std::int64_t global_index(std::int64_t r, std::int64_t c) const;
};

// kOutput: the untied output layer (lm_head) of the last stage.
enum class UnitKind { kLayer, kEmbedding, kTiedCopy, kFinalNorm, kOutput };

struct UnitLayout {
  std::string name;           // "layer3", "embedding", "wte_copy", "final_norm", "output"
  UnitKind kind = UnitKind::kLayer;
  std::int64_t layer = -1;
  std::vector<ParamSegment> segments;
  std::int64_t count = 0;     // floats (unpadded)
  const ParamSegment& segment(const std::string& name) const;  // std::out_of_range if absent
};

// Parameter counts on one TP rank: each the local_param_count of layer_tensors.h's
// description, i.e. the `count` of the layout built below (tests/cost_model/param_layout_test.cc
// checks it). For GPT-2 at t = 1 a layer is 12h^2 + 13h; at t: (4h^2 + 2hf + 3h + f)/t + 6h
// (QKV, proj, fc1, fc2 weights and the column-parallel biases split by t; proj/fc2 biases and
// both LayerNorms replicated). layer_params_per_tp_rank throws InfeasiblePlan when
// tensor_parallel_violation (partition.h) says t cannot split the layer.
//   embedding   wte shard (vocab_shard_rows rows of h) [+ replicated wpe s h]
//   tied copy   the wte shard (the last stage's copy, p > 1, tied output only)
//   output      the untied lm_head shard (vocab_shard_rows rows of h); 0 when tied
//   final norm  2h (LayerNorm with biases) or h
std::int64_t layer_params_per_tp_rank(const ModelSpec& model, std::int64_t tp);
std::int64_t embedding_params_per_tp_rank(const ModelSpec& model, std::int64_t tp,
                                          std::int64_t row_alignment = 1);
std::int64_t tied_copy_params_per_tp_rank(const ModelSpec& model, std::int64_t tp,
                                          std::int64_t row_alignment = 1);
std::int64_t output_params_per_tp_rank(const ModelSpec& model, std::int64_t tp,
                                       std::int64_t row_alignment = 1);
std::int64_t final_norm_params(const ModelSpec& model);
// The norms' parameters of one layer (replicated on every TP rank): 4h for GPT-2, 2h RMSNorm.
std::int64_t layer_norm_params(const ModelSpec& model);
// The vocabulary-sized parameters the last of p stages holds besides the layers and the
// final norm: the tied wte copy when p > 1, the untied output layer always, else 0.
std::int64_t last_stage_vocab_params(const ModelSpec& model, std::int64_t tp, std::int64_t pp,
                                     std::int64_t row_alignment = 1);
// The largest of a layer's four linear modules (weight and bias) on one TP rank: the unit of
// a ZeRO-3 per-module gather.
std::int64_t largest_layer_module_params(const ModelSpec& model, std::int64_t tp);

// A layer in layer_tensor_specs order. GPT-2's: ln1_w ln1_b qkv_w qkv_b proj_w proj_b ln2_w
// ln2_b fc_w fc_b fc2_w fc2_b. Weights normal(0, 0.02), proj_w and fc2_w normal(0,
// 0.02/sqrt(2 L)) (GPT-2), norm gains 1, biases 0.
UnitLayout layer_layout(const ModelSpec& model, const TpShape& tp, std::int64_t layer);
// wte shard (ceil(V/t), h) then, with learned positions, wpe (s, h), normal(0, 0.02).
UnitLayout embedding_layout(const ModelSpec& model, const TpShape& tp);
// The last stage's copy of the wte shard (p > 1, tied): same values as the embedding's wte.
UnitLayout tied_copy_layout(const ModelSpec& model, const TpShape& tp);
// The untied output layer's shard lm_head (ceil(V/t), h), normal(0, 0.02).
UnitLayout output_layout(const ModelSpec& model, const TpShape& tp);
// lnf_w (h) ones, lnf_b (h) zeros when the norm has a bias.
UnitLayout final_norm_layout(const ModelSpec& model);

}  // namespace strata
