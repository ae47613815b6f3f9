// The description of a model's tensors and their local shapes on a TP rank (see
// layer_tensors.h). The only place that knows which tensors a family's choices give.
#include "cost_model/specs/layer_tensors.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace strata {
namespace {

TensorSpec spec(const char* name, int code, std::int64_t rows, std::int64_t cols, TpSplit split,
                LayerGemm gemm, InitKind init, std::int64_t parts = 1, bool residual_scaled = false) {
  TensorSpec s;
  s.name = name;
  s.code = code;
  s.rows = rows;
  s.cols = cols;
  s.parts = parts;
  s.split = split;
  s.gemm = gemm;
  s.init = init;
  s.residual_scaled = residual_scaled;
  return s;
}

// A norm's gain, and its bias for a LayerNorm with biases (RMSNorm has none).
void add_norm(TensorSpecs& out, const ModelSpec& m, const char* w, int w_code,
              const char* b, int b_code) {
  out.push_back(spec(w, w_code, m.hidden, 1, TpSplit::kReplicated, LayerGemm::kNone, InitKind::kOnes));
  if (m.norm == NormKind::kLayerNorm && m.biases) {
    out.push_back(spec(b, b_code, m.hidden, 1, TpSplit::kReplicated, LayerGemm::kNone, InitKind::kZeros));
  }
}

// A linear layer's weight and, with biases, its bias (split like the weight's rows for a
// column-parallel layer, replicated for a row-parallel one).
void add_linear(TensorSpecs& out, const ModelSpec& m, const char* w, int w_code,
                const char* b, int b_code, std::int64_t rows, std::int64_t cols, TpSplit split,
                LayerGemm gemm, std::int64_t parts = 1, bool residual_scaled = false) {
  out.push_back(spec(w, w_code, rows, cols, split, gemm, InitKind::kNormal, parts, residual_scaled));
  if (!m.biases) return;
  const TpSplit bias_split = split == TpSplit::kCols ? TpSplit::kReplicated : split;
  out.push_back(spec(b, b_code, rows, 1, bias_split, gemm, InitKind::kZeros, parts));
}

}  // namespace

void TensorSpecs::push_back(const TensorSpec& spec) {
  if (size_ == kCapacity) {
    throw std::logic_error(fmt::format("layer_tensors: more than {} tensors in a unit at {}",
                                       kCapacity, spec.name));
  }
  items_[size_++] = spec;
}

std::int64_t vocab_shard_rows(const ModelSpec& model, std::int64_t tp, std::int64_t row_alignment) {
  const std::int64_t rows = (model.vocab + tp - 1) / tp;
  return (rows + row_alignment - 1) / row_alignment * row_alignment;
}

std::int64_t kv_heads_per_rank(const ModelSpec& model, std::int64_t tp) {
  const std::int64_t kv = model.kv_head_count();
  return tp <= kv ? kv / tp : 1;
}

std::int64_t kv_head_copies(const ModelSpec& model, std::int64_t tp) {
  const std::int64_t kv = model.kv_head_count();
  return tp > kv ? tp / kv : 1;
}

std::int64_t replicated_kv_params_per_tp_rank(const ModelSpec& model, std::int64_t tp) {
  if (kv_head_copies(model, tp) == 1) return 0;
  std::int64_t n = 0;
  for (const TensorSpec& s : layer_tensor_specs(model)) {
    if (s.split == TpSplit::kKvRows) n += local_shape(s, model, TpShape{tp, 0, 1}).count();
  }
  return n;
}

TensorSpecs layer_tensor_specs(const ModelSpec& m) {
  const std::int64_t h = m.hidden;
  const std::int64_t f = m.ffn_hidden;
  const std::int64_t kv_rows = m.kv_head_count() * m.head_dim();
  TensorSpecs out;
  add_norm(out, m, "ln1_w", kLn1W, "ln1_b", kLn1B);
  if (kv_rows == h) {
    // Q, K and V of equal widths: one fused (3h, h) tensor, parts split alike (GPT-2).
    add_linear(out, m, "qkv_w", kQkvW, "qkv_b", kQkvB, 3 * h, h, TpSplit::kRows, LayerGemm::kQkv, 3);
  } else {
    add_linear(out, m, "q_w", kQW, "q_b", kQB, h, h, TpSplit::kRows, LayerGemm::kQkv);
    add_linear(out, m, "kv_w", kKvW, "kv_b", kKvB, 2 * kv_rows, h, TpSplit::kKvRows,
               LayerGemm::kQkv, 2);
  }
  add_linear(out, m, "proj_w", kProjW, "proj_b", kProjB, h, h, TpSplit::kCols, LayerGemm::kProj,
             1, true);
  add_norm(out, m, "ln2_w", kLn2W, "ln2_b", kLn2B);
  const std::int64_t fc_parts = m.mlp == MlpKind::kSwiglu ? 2 : 1;  // gate | up
  add_linear(out, m, "fc_w", kFcW, "fc_b", kFcB, fc_parts * f, h, TpSplit::kRows, LayerGemm::kFc1,
             fc_parts);
  add_linear(out, m, "fc2_w", kFc2W, "fc2_b", kFc2B, h, f, TpSplit::kCols, LayerGemm::kFc2, 1, true);
  return out;
}

TensorSpecs embedding_tensor_specs(const ModelSpec& m) {
  TensorSpecs out;
  out.push_back(
      spec("wte", kWte, m.vocab, m.hidden, TpSplit::kVocabRows, LayerGemm::kNone, InitKind::kNormal));
  if (m.position == PositionKind::kLearned) {
    out.push_back(spec("wpe", kWpe, m.seq_len, m.hidden, TpSplit::kReplicated, LayerGemm::kNone,
                       InitKind::kNormal));
  }
  return out;
}

TensorSpecs final_norm_tensor_specs(const ModelSpec& m) {
  TensorSpecs out;
  add_norm(out, m, "lnf_w", kLnfW, "lnf_b", kLnfB);
  return out;
}

TensorSpecs output_tensor_specs(const ModelSpec& m) {
  TensorSpecs out;
  if (!m.tied_output) {
    out.push_back(spec("lm_head", kLmHead, m.vocab, m.hidden, TpSplit::kVocabRows, LayerGemm::kNone,
                       InitKind::kNormal));
  }
  return out;
}

LocalShape local_shape(const TensorSpec& s, const ModelSpec& model, const TpShape& tp) {
  LocalShape l;
  l.rows = s.rows;
  l.cols = s.cols;
  l.part_rows = s.rows / s.parts;
  l.part_stride = s.parts > 1 ? s.rows / s.parts : 0;  // one part: never read
  switch (s.split) {
    case TpSplit::kReplicated: break;
    case TpSplit::kRows:
      l.part_rows = s.rows / s.parts / tp.tp;
      l.row_offset = tp.tp_rank * l.part_rows;
      break;
    case TpSplit::kCols:
      l.cols = s.cols / tp.tp;
      l.col_offset = tp.tp_rank * l.cols;
      break;
    case TpSplit::kKvRows: {
      const std::int64_t d = model.head_dim();
      const std::int64_t kv = model.kv_head_count();
      l.part_rows = kv_heads_per_rank(model, tp.tp) * d;
      // t <= kv: rank k holds KV heads [k kv/t, ...); t > kv: the head of its query heads'
      // group, rank k / (t / kv).
      const std::int64_t first_head =
          tp.tp <= kv ? tp.tp_rank * (kv / tp.tp) : tp.tp_rank / kv_head_copies(model, tp.tp);
      l.row_offset = first_head * d;
      break;
    }
    case TpSplit::kVocabRows: {
      // Global vocabulary ids of the shard start at tp_rank ceil(V/t), whatever the padding.
      const std::int64_t real_rows = vocab_shard_rows(model, tp.tp);
      l.part_rows = vocab_shard_rows(model, tp.tp, tp.vocab_row_alignment);
      l.row_offset = tp.tp_rank * real_rows;
      const std::int64_t left = std::min(model.vocab - l.row_offset, real_rows);
      l.valid_rows = std::clamp<std::int64_t>(left, 0, l.part_rows);
      l.rows = l.part_rows;
      return l;
    }
  }
  l.rows = l.part_rows * s.parts;
  l.valid_rows = l.rows;
  return l;
}

std::int64_t local_param_count(const TensorSpecs& specs, const ModelSpec& model,
                               const TpShape& tp) {
  std::int64_t n = 0;
  for (const TensorSpec& s : specs) n += local_shape(s, model, tp).count();
  return n;
}

LayerGemmShapes layer_gemm_shapes(const ModelSpec& model, std::int64_t tp) {
  LayerGemmShapes g;
  const TpShape shape{tp, 0, 1};
  for (const TensorSpec& s : layer_tensor_specs(model)) {
    if (!s.is_weight()) continue;
    const LocalShape l = local_shape(s, model, shape);
    switch (s.gemm) {
      case LayerGemm::kQkv: g.qkv_out += l.rows; g.qkv_in = l.cols; break;
      case LayerGemm::kProj: g.proj_out = l.rows; g.proj_in = l.cols; break;
      case LayerGemm::kFc1: g.fc1_out = l.rows; g.fc1_in = l.cols; break;
      case LayerGemm::kFc2: g.fc2_out = l.rows; g.fc2_in = l.cols; break;
      case LayerGemm::kNone: break;
    }
  }
  return g;
}

std::int64_t layer_matmul_params(const ModelSpec& model) {
  std::int64_t n = 0;
  for (const TensorSpec& s : layer_tensor_specs(model)) {
    if (s.is_weight() && s.gemm != LayerGemm::kNone) n += s.rows * s.cols;
  }
  return n;
}

double layer_forward_flops_per_token(const ModelSpec& model) {
  const double attention_width = static_cast<double>(model.heads * model.head_dim());
  return 2.0 * static_cast<double>(layer_matmul_params(model)) +
         4.0 * static_cast<double>(model.seq_len) * attention_width;
}

double logits_forward_flops_per_token(const ModelSpec& model) {
  return 2.0 * static_cast<double>(model.vocab) * static_cast<double>(model.hidden);
}

}  // namespace strata
