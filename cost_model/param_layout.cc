// Flat layouts of the GPT units on one TP rank and their plan-independent initialisation
// (see param_layout.h).
#include "cost_model/param_layout.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "cost_model/errors.h"

namespace strata {
namespace {

constexpr double kInitStd = 0.02;  // GPT-2's initializer_range

struct Builder {
  UnitLayout unit;
  ParamSegment& add(const std::string& name, int code, std::int64_t rows, std::int64_t cols,
                    InitKind init, double std_dev, bool replicated) {
    ParamSegment s;
    s.name = name;
    s.code = code;
    s.layer = unit.layer;
    s.offset = unit.count;
    s.rows = rows;
    s.cols = cols;
    s.part_rows = rows;
    s.global_cols = cols;
    s.valid_rows = rows;
    s.init = init;
    s.init_std = std_dev;
    s.tp_replicated = replicated;
    unit.count += rows * cols;
    unit.segments.push_back(s);
    return unit.segments.back();
  }
};

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

std::int64_t vocab_shard_rows(const ModelSpec& model, std::int64_t tp, std::int64_t row_alignment) {
  const std::int64_t rows = (model.vocab + tp - 1) / tp;
  return (rows + row_alignment - 1) / row_alignment * row_alignment;
}

std::int64_t layer_params_per_tp_rank(const ModelSpec& model, std::int64_t tp) {
  const std::int64_t h = model.hidden;
  const std::int64_t f = model.ffn_hidden;
  if (tp < 1 || model.heads % tp != 0 || f % tp != 0 || h % tp != 0) {
    throw InfeasiblePlan(fmt::format(
        "tp = {} must be >= 1 and divide heads ({}), hidden ({}) and ffn_hidden ({})", tp,
        model.heads, h, f));
  }
  return (4 * h * h + 2 * h * f + 3 * h + f) / tp + 6 * h;
}

std::int64_t embedding_params_per_tp_rank(const ModelSpec& model, std::int64_t tp,
                                          std::int64_t row_alignment) {
  return vocab_shard_rows(model, tp, row_alignment) * model.hidden + model.seq_len * model.hidden;
}

std::int64_t tied_copy_params_per_tp_rank(const ModelSpec& model, std::int64_t tp,
                                          std::int64_t row_alignment) {
  return vocab_shard_rows(model, tp, row_alignment) * model.hidden;
}

std::int64_t final_norm_params(const ModelSpec& model) { return 2 * model.hidden; }

UnitLayout layer_layout(const ModelSpec& model, const TpShape& tp, std::int64_t layer) {
  const std::int64_t h = model.hidden;
  const std::int64_t hl = h / tp.tp;
  const std::int64_t fl = model.ffn_hidden / tp.tp;
  const double proj_std = kInitStd / std::sqrt(2.0 * static_cast<double>(model.layers));
  Builder b;
  b.unit.name = "layer" + std::to_string(layer);
  b.unit.kind = UnitKind::kLayer;
  b.unit.layer = layer;
  b.add("ln1_w", kLn1W, h, 1, InitKind::kOnes, 0, true);
  b.add("ln1_b", kLn1B, h, 1, InitKind::kZeros, 0, true);
  // qkv_w local (3 hl, h): part P (q, k, v), local row i -> global row P h + tp_rank hl + i.
  auto& qkv_w = b.add("qkv_w", kQkvW, 3 * hl, h, InitKind::kNormal, kInitStd, false);
  qkv_w.part_rows = hl;
  qkv_w.part_stride = h;
  qkv_w.row_offset = tp.tp_rank * hl;
  qkv_w.global_cols = h;
  auto& qkv_b = b.add("qkv_b", kQkvB, 3 * hl, 1, InitKind::kZeros, 0, false);
  qkv_b.part_rows = hl;
  qkv_b.part_stride = h;
  qkv_b.row_offset = tp.tp_rank * hl;
  // proj_w local (h, hl): the rank's input columns of the global (h, h).
  auto& proj_w = b.add("proj_w", kProjW, h, hl, InitKind::kNormal, proj_std, false);
  proj_w.global_cols = h;
  proj_w.col_offset = tp.tp_rank * hl;
  b.add("proj_b", kProjB, h, 1, InitKind::kZeros, 0, true);
  b.add("ln2_w", kLn2W, h, 1, InitKind::kOnes, 0, true);
  b.add("ln2_b", kLn2B, h, 1, InitKind::kZeros, 0, true);
  auto& fc_w = b.add("fc_w", kFcW, fl, h, InitKind::kNormal, kInitStd, false);
  fc_w.row_offset = tp.tp_rank * fl;
  auto& fc_b = b.add("fc_b", kFcB, fl, 1, InitKind::kZeros, 0, false);
  fc_b.row_offset = tp.tp_rank * fl;
  auto& fc2_w = b.add("fc2_w", kFc2W, h, fl, InitKind::kNormal, proj_std, false);
  fc2_w.global_cols = model.ffn_hidden;
  fc2_w.col_offset = tp.tp_rank * fl;
  b.add("fc2_b", kFc2B, h, 1, InitKind::kZeros, 0, true);
  return b.unit;
}

namespace {
void add_wte(Builder& b, const ModelSpec& model, const TpShape& tp) {
  // Global vocabulary ids of the shard start at tp_rank ceil(V/t), whatever the padding.
  const std::int64_t rows = vocab_shard_rows(model, tp.tp, tp.vocab_row_alignment);
  auto& wte = b.add("wte", kWte, rows, model.hidden, InitKind::kNormal, kInitStd, false);
  const std::int64_t real_rows = vocab_shard_rows(model, tp.tp);
  wte.row_offset = tp.tp_rank * real_rows;
  const std::int64_t left = std::min(model.vocab - wte.row_offset, real_rows);
  wte.valid_rows = left < 0 ? 0 : (left < rows ? left : rows);
}
}  // namespace

UnitLayout embedding_layout(const ModelSpec& model, const TpShape& tp) {
  Builder b;
  b.unit.name = "embedding";
  b.unit.kind = UnitKind::kEmbedding;
  add_wte(b, model, tp);
  b.add("wpe", kWpe, model.seq_len, model.hidden, InitKind::kNormal, kInitStd, true);
  return b.unit;
}

UnitLayout tied_copy_layout(const ModelSpec& model, const TpShape& tp) {
  Builder b;
  b.unit.name = "wte_copy";
  b.unit.kind = UnitKind::kTiedCopy;
  add_wte(b, model, tp);
  return b.unit;
}

UnitLayout final_norm_layout(const ModelSpec& model) {
  Builder b;
  b.unit.name = "final_norm";
  b.unit.kind = UnitKind::kFinalNorm;
  b.add("lnf_w", kLnfW, model.hidden, 1, InitKind::kOnes, 0, true);
  b.add("lnf_b", kLnfB, model.hidden, 1, InitKind::kZeros, 0, true);
  return b.unit;
}

LayerOffsets layer_offsets(const UnitLayout& layer) {
  const auto at = [&layer](const char* name) { return layer.segment(name).offset; };
  return LayerOffsets{at("ln1_w"), at("ln1_b"), at("qkv_w"), at("qkv_b"),
                      at("proj_w"), at("proj_b"), at("ln2_w"), at("ln2_b"),
                      at("fc_w"), at("fc_b"), at("fc2_w"), at("fc2_b")};
}

}  // namespace strata
