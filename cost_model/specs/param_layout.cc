// Flat layouts of the model's units on one TP rank and their plan-independent initialisation
// (see param_layout.h). The tensors themselves come from layer_tensors.h.
#include "cost_model/specs/param_layout.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/partition.h"

namespace strata {
namespace {

constexpr double kInitStd = 0.02;  // GPT-2's initializer_range (Llama 3's too)

UnitLayout build_unit(std::string name, UnitKind kind, std::int64_t layer,
                      const TensorSpecs& specs, const ModelSpec& model,
                      const TpShape& tp) {
  UnitLayout unit;
  unit.name = std::move(name);
  unit.kind = kind;
  unit.layer = layer;
  const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(model.layers));
  for (const TensorSpec& t : specs) {
    const LocalShape l = local_shape(t, model, tp);
    ParamSegment s;
    s.name = t.name;
    s.code = t.code;
    s.layer = layer;
    s.offset = unit.count;
    s.rows = l.rows;
    s.cols = l.cols;
    s.part_rows = l.part_rows;
    s.part_stride = l.part_stride;
    s.row_offset = l.row_offset;
    s.col_offset = l.col_offset;
    s.global_cols = t.cols;
    s.valid_rows = l.valid_rows;
    s.init = t.init;
    s.init_std = t.init == InitKind::kNormal ? (t.residual_scaled ? residual_std : kInitStd) : 0.0;
    s.tp_replicated = t.split == TpSplit::kReplicated;
    if (t.split == TpSplit::kKvRows) s.tp_copies = kv_head_copies(model, tp.tp);
    unit.count += s.count();
    unit.segments.push_back(std::move(s));
  }
  return unit;
}

TensorSpecs only(const TensorSpecs& specs, std::string_view name) {
  TensorSpecs out;
  for (const TensorSpec& s : specs) {
    if (name == s.name) out.push_back(s);
  }
  return out;
}

}  // namespace

std::int64_t ParamSegment::global_index(std::int64_t r, std::int64_t c) const {
  const std::int64_t part = r / part_rows;
  const std::int64_t i = r % part_rows;
  return (part * part_stride + row_offset + i) * global_cols + col_offset + c;
}

const ParamSegment& UnitLayout::segment(const std::string& wanted) const {
  for (const auto& s : segments) {
    if (s.name == wanted) return s;
  }
  throw std::out_of_range("unit " + name + " has no tensor " + wanted);
}

std::int64_t layer_params_per_tp_rank(const ModelSpec& model, std::int64_t tp) {
  if (const std::string why = tensor_parallel_violation(model, tp); !why.empty()) {
    throw InfeasiblePlan(why);
  }
  return local_param_count(layer_tensor_specs(model), model, TpShape{tp, 0, 1});
}

std::int64_t embedding_params_per_tp_rank(const ModelSpec& model, std::int64_t tp,
                                          std::int64_t row_alignment) {
  return local_param_count(embedding_tensor_specs(model), model, TpShape{tp, 0, row_alignment});
}

std::int64_t tied_copy_params_per_tp_rank(const ModelSpec& model, std::int64_t tp,
                                          std::int64_t row_alignment) {
  return local_param_count(only(embedding_tensor_specs(model), "wte"), model,
                           TpShape{tp, 0, row_alignment});
}

std::int64_t output_params_per_tp_rank(const ModelSpec& model, std::int64_t tp,
                                       std::int64_t row_alignment) {
  return local_param_count(output_tensor_specs(model), model, TpShape{tp, 0, row_alignment});
}

std::int64_t final_norm_params(const ModelSpec& model) {
  return local_param_count(final_norm_tensor_specs(model), model, TpShape{});
}

std::int64_t layer_norm_params(const ModelSpec& model) {
  std::int64_t n = 0;
  for (const TensorSpec& s : layer_tensor_specs(model)) {
    if (s.gemm == LayerGemm::kNone) n += s.rows * s.cols;
  }
  return n;
}

std::int64_t last_stage_vocab_params(const ModelSpec& model, std::int64_t tp, std::int64_t pp,
                                     std::int64_t row_alignment) {
  if (!model.tied_output) return output_params_per_tp_rank(model, tp, row_alignment);
  // Tied: the output layer is the token embedding; with p > 1 the last stage holds its own
  // copy (Megatron keeps them equal by all-reducing their gradients).
  return pp > 1 ? tied_copy_params_per_tp_rank(model, tp, row_alignment) : 0;
}

std::int64_t largest_layer_module_params(const ModelSpec& model, std::int64_t tp) {
  const TpShape shape{tp, 0, 1};
  std::int64_t by_gemm[5] = {0, 0, 0, 0, 0};
  for (const TensorSpec& s : layer_tensor_specs(model)) {
    by_gemm[static_cast<int>(s.gemm)] += local_shape(s, model, shape).count();
  }
  return *std::max_element(by_gemm + 1, by_gemm + 5);  // [0] is kNone: the norms
}

UnitLayout layer_layout(const ModelSpec& model, const TpShape& tp, std::int64_t layer) {
  return build_unit("layer" + std::to_string(layer), UnitKind::kLayer, layer,
                    layer_tensor_specs(model), model, tp);
}

UnitLayout embedding_layout(const ModelSpec& model, const TpShape& tp) {
  return build_unit("embedding", UnitKind::kEmbedding, -1, embedding_tensor_specs(model), model, tp);
}

UnitLayout tied_copy_layout(const ModelSpec& model, const TpShape& tp) {
  return build_unit("wte_copy", UnitKind::kTiedCopy, -1, only(embedding_tensor_specs(model), "wte"),
                    model, tp);
}

UnitLayout output_layout(const ModelSpec& model, const TpShape& tp) {
  return build_unit("output", UnitKind::kOutput, -1, output_tensor_specs(model), model, tp);
}

UnitLayout final_norm_layout(const ModelSpec& model) {
  return build_unit("final_norm", UnitKind::kFinalNorm, -1, final_norm_tensor_specs(model), model,
                    TpShape{});
}

}  // namespace strata
