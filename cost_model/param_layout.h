// Flat parameter buffers of the GPT model on one tensor-parallel rank: which tensors a unit
// holds (one unit = one contiguous fp32 buffer: a transformer layer, the embedding, the
// tied output-embedding copy or the final LayerNorm), at which offsets, with their local
// shapes, how local elements map to the single-rank model's global indices (for init), and
// whether the tensor is replicated over the TP group (for a global grad norm that counts
// every parameter once). ZeRO partitions these units; gradients use the same layout.
//
// Tensor parallelism (Megatron): QKV column-parallel (heads split: local rows are [q | k | v]
// of the rank's heads), proj row-parallel (local input columns), fc column-parallel, fc2
// row-parallel; LayerNorms and the biases of row-parallel layers replicated; wte split by
// vocabulary rows: rank k holds rows [k * ceil(V/t), ...), the last shard padded with rows
// that stay zero; wpe replicated.
// Deliberately not here: memory, communication, the math of the layers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/model_spec.h"

namespace strata {

enum class InitKind { kNormal, kOnes, kZeros };

// Codes that key each tensor's random stream (see param_init.h); stable across plans.
enum TensorCode : int {
  kLn1W = 1, kLn1B, kQkvW, kQkvB, kProjW, kProjB, kLn2W, kLn2B, kFcW, kFcB, kFc2W, kFc2B,
  kWte, kWpe, kLnfW, kLnfB,
};

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
  std::int64_t count() const { return rows * cols; }
  std::int64_t global_index(std::int64_t r, std::int64_t c) const;
};

enum class UnitKind { kLayer, kEmbedding, kTiedCopy, kFinalNorm };

struct UnitLayout {
  std::string name;           // "layer3", "embedding", "wte_copy", "final_norm"
  UnitKind kind = UnitKind::kLayer;
  std::int64_t layer = -1;
  std::vector<ParamSegment> segments;
  std::int64_t count = 0;     // floats (unpadded)
  const ParamSegment& segment(const std::string& name) const;  // std::out_of_range if absent
};

struct TpShape {
  std::int64_t tp = 1;
  std::int64_t tp_rank = 0;
  // wte shard rows are rounded up to a multiple of this (partition.h: vocab_row_alignment).
  std::int64_t vocab_row_alignment = 1;
};

// Rows of wte per TP rank: ceil(V / t) rounded up to a multiple of `row_alignment` (the
// padding rows stay zero and are never trained).
std::int64_t vocab_shard_rows(const ModelSpec& model, std::int64_t tp, std::int64_t row_alignment = 1);

// Parameter counts on one TP rank, in closed form for the planner's hot path; each equals
// the `count` of the layout built below (tests/cost_model/param_layout_test.cc checks it).
//   layer       (4h^2 + 2hf + 3h + f)/t + 6h: QKV, proj, fc1, fc2 weights and the column-
//               parallel biases split by t; proj/fc2 biases and both LayerNorms replicated
//               (at t = 1, f = 4h: 12h^2 + 13h). Throws InfeasiblePlan unless t divides
//               heads, hidden and ffn_hidden.
//   embedding   rows h + s h (wte shard of vocab_shard_rows rows + replicated wpe)
//   tied copy   rows h (the last stage's copy of the wte shard, p > 1)
//   final norm  2h
std::int64_t layer_params_per_tp_rank(const ModelSpec& model, std::int64_t tp);
std::int64_t embedding_params_per_tp_rank(const ModelSpec& model, std::int64_t tp,
                                          std::int64_t row_alignment = 1);
std::int64_t tied_copy_params_per_tp_rank(const ModelSpec& model, std::int64_t tp,
                                          std::int64_t row_alignment = 1);
std::int64_t final_norm_params(const ModelSpec& model);

// Segment order of a layer: ln1_w ln1_b qkv_w qkv_b proj_w proj_b ln2_w ln2_b fc_w fc_b
// fc2_w fc2_b. Weights normal(0, 0.02), proj_w and fc2_w normal(0, 0.02/sqrt(2 L)) (GPT-2),
// LayerNorm gains 1, biases 0.
UnitLayout layer_layout(const ModelSpec& model, const TpShape& tp, std::int64_t layer);
// wte shard (ceil(V/t), h) then wpe (s, h), normal(0, 0.02).
UnitLayout embedding_layout(const ModelSpec& model, const TpShape& tp);
// The last stage's copy of the wte shard (p > 1): same values as the embedding's wte.
UnitLayout tied_copy_layout(const ModelSpec& model, const TpShape& tp);
// lnf_w (h) ones, lnf_b (h) zeros.
UnitLayout final_norm_layout(const ModelSpec& model);

// Offsets of a layer's tensors in its flat buffer (the order of layer_layout).
struct LayerOffsets {
  std::int64_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fc2_w,
      fc2_b;
};
LayerOffsets layer_offsets(const UnitLayout& layer);

}  // namespace strata
