// ModelSpec loading and validation; its parameter counts read layer_tensors.h. See
// model_spec.h. Does not know about parallelism: per-rank shards (tp, pp) are
// layer_tensors.h's and the memory model's job.
#include "cost_model/specs/model_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/layer_tensors.h"
#include "cost_model/specs/limits.h"

namespace strata {

std::string to_string(NormKind kind) { return kind == NormKind::kRmsNorm ? "rmsnorm" : "layernorm"; }
std::string to_string(MlpKind kind) { return kind == MlpKind::kSwiglu ? "swiglu" : "gelu"; }
std::string to_string(PositionKind kind) { return kind == PositionKind::kRope ? "rope" : "learned"; }

namespace {

constexpr double kGptNormEpsilon = 1e-5;  // kernels/cpu/layernorm.h: kLayerNormEps

// "rope_scaling": {"rope_type": "llama3" (optional, the only type), "factor",
// "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}, all four
// required: a scaling half-written is a mistake, not a default. The bounds are what
// kernels/rope_frequency.h's formula needs: factor >= 1 (1 = none), 0 < low < high (the
// blend divides by high - low), a positive original context.
RopeScaling read_rope_scaling(JsonObjectReader& parent) {
  JsonObjectReader r = parent.get_object("rope_scaling");
  r.get_enum_or("rope_type", {"llama3"}, "llama3");
  RopeScaling s;
  s.factor = r.get_number("factor");
  s.low_freq_factor = r.get_number("low_freq_factor");
  s.high_freq_factor = r.get_number("high_freq_factor");
  s.original_max_position_embeddings = r.get_int("original_max_position_embeddings");
  r.finish();
  if (!(s.factor >= 1.0)) r.fail("factor", fmt::format("{}", s.factor), ">= 1 (1: no scaling)");
  r.require_positive("low_freq_factor", s.low_freq_factor);
  if (!(s.low_freq_factor < s.high_freq_factor)) {
    r.fail("high_freq_factor", fmt::format("{}", s.high_freq_factor),
           fmt::format("> low_freq_factor = {}", s.low_freq_factor));
  }
  r.require_positive("original_max_position_embeddings",
                     static_cast<double>(s.original_max_position_embeddings));
  return s;
}

// The family's keys, all optional; validated against the shape read before them.
void read_family(JsonObjectReader& r, ModelSpec& m) {
  m.norm = r.get_enum_or("norm", {"layernorm", "rmsnorm"}, "layernorm") == "rmsnorm"
               ? NormKind::kRmsNorm
               : NormKind::kLayerNorm;
  m.norm_epsilon = r.get_number_or("norm_epsilon", kGptNormEpsilon);
  if (!(m.norm_epsilon > 0 && m.norm_epsilon < 1)) {
    r.fail("norm_epsilon", fmt::format("{}", m.norm_epsilon), "a number in (0, 1)");
  }
  m.mlp = r.get_enum_or("mlp", {"gelu", "swiglu"}, "gelu") == "swiglu" ? MlpKind::kSwiglu
                                                                       : MlpKind::kGelu;
  m.position = r.get_enum_or("position", {"learned", "rope"}, "learned") == "rope"
                   ? PositionKind::kRope
                   : PositionKind::kLearned;
  if (m.position == PositionKind::kRope) {
    m.rope_theta = r.get_number_or("rope_theta", m.rope_theta);
    r.require_positive("rope_theta", m.rope_theta);
    // Rotary embedding turns pairs of a head's channels (RoFormer, Su et al. 2021, eq. 34).
    if (m.head_dim() % 2 != 0) {
      r.fail("position", "\"rope\"",
             fmt::format("an even head_dim for rotary pairs, but hidden / heads = {} / {} = {}",
                         m.hidden, m.heads, m.head_dim()));
    }
    if (r.has("rope_scaling")) m.rope_scaling = read_rope_scaling(r);
  } else if (r.has("rope_theta")) {
    // A theta that nothing reads is a typo for position = rope, not a harmless extra.
    r.fail("rope_theta", value_text(r.get_number("rope_theta")), "no rope_theta unless position = \"rope\"");
  } else if (r.has("rope_scaling")) {
    r.fail("rope_scaling", "{...}", "no rope_scaling unless position = \"rope\"");
  }
  m.kv_heads = r.get_int_or("kv_heads", m.heads);
  r.require_positive("kv_heads", static_cast<double>(m.kv_heads));
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0) {
    r.fail("kv_heads", std::to_string(m.kv_heads),
           fmt::format("a divisor of heads = {} (each KV head serves a whole group of query "
                       "heads)", m.heads));
  }
  m.tied_output = r.get_bool_or("tied_output", true);
  m.biases = r.get_bool_or("biases", true);
}

}  // namespace

ModelSpec ModelSpec::from_json(const Json& json, const std::string& source) {
  JsonObjectReader r(json, source);
  ModelSpec m;
  m.name = r.get_string("name");
  if (m.name.empty()) r.fail("name", "\"\"", "a non-empty name");
  m.layers = r.get_int("layers");
  m.hidden = r.get_int("hidden");
  m.heads = r.get_int("heads");
  m.seq_len = r.get_int("seq_len");
  m.vocab = r.get_int("vocab");
  r.require_positive("layers", static_cast<double>(m.layers));
  r.require_positive("hidden", static_cast<double>(m.hidden));
  r.require_positive("heads", static_cast<double>(m.heads));
  r.require_positive("seq_len", static_cast<double>(m.seq_len));
  r.require_positive("vocab", static_cast<double>(m.vocab));
  r.require_at_most("layers", static_cast<double>(m.layers), limits::kLayers);
  r.require_at_most("hidden", static_cast<double>(m.hidden), limits::kHidden);
  r.require_at_most("heads", static_cast<double>(m.heads), limits::kHeads);
  r.require_at_most("seq_len", static_cast<double>(m.seq_len), limits::kSeqLen);
  r.require_at_most("vocab", static_cast<double>(m.vocab), limits::kVocab);
  // ffn_hidden is optional: nearly every GPT uses 4h, and writing it in every config would
  // only invite copies that disagree with hidden.
  m.ffn_hidden = r.get_int_or("ffn_hidden", 4 * m.hidden);
  r.require_positive("ffn_hidden", static_cast<double>(m.ffn_hidden));
  r.require_at_most("ffn_hidden", static_cast<double>(m.ffn_hidden), limits::kFfnHidden);
  if (m.hidden % m.heads != 0) {
    r.fail("hidden", std::to_string(m.hidden),
           fmt::format("a multiple of heads = {} (hidden % heads = {})", m.heads,
                       m.hidden % m.heads));
  }
  read_family(r, m);
  r.finish();
  return m;
}

ModelSpec ModelSpec::load(const std::string& path) { return from_json(read_json_file(path), path); }

Json ModelSpec::to_json() const {
  // ffn_hidden is always written so that a saved spec says what it means on its own.
  Json j{{"name", name},   {"layers", layers},   {"hidden", hidden},        {"heads", heads},
         {"seq_len", seq_len}, {"vocab", vocab}, {"ffn_hidden", ffn_hidden}};
  if (is_gpt_family()) return j;
  j["norm"] = to_string(norm);
  j["norm_epsilon"] = norm_epsilon;
  j["mlp"] = to_string(mlp);
  j["position"] = to_string(position);
  if (position == PositionKind::kRope) j["rope_theta"] = rope_theta;
  if (rope_scaling) {
    // rope_type is not written: "llama3" is the only type, and a config read without it
    // round-trips unchanged.
    j["rope_scaling"] = Json{{"factor", rope_scaling->factor},
                             {"low_freq_factor", rope_scaling->low_freq_factor},
                             {"high_freq_factor", rope_scaling->high_freq_factor},
                             {"original_max_position_embeddings",
                              rope_scaling->original_max_position_embeddings}};
  }
  j["kv_heads"] = kv_head_count();
  j["tied_output"] = tied_output;
  j["biases"] = biases;
  return j;
}

bool ModelSpec::is_gpt_family() const {
  return norm == NormKind::kLayerNorm && norm_epsilon == kGptNormEpsilon && mlp == MlpKind::kGelu &&
         position == PositionKind::kLearned && kv_head_count() == heads && tied_output && biases;
}

std::string ModelSpec::family_name() const {
  if (is_gpt_family()) return "gpt";
  std::vector<std::string> parts;
  if (norm != NormKind::kLayerNorm) parts.push_back(to_string(norm));
  if (norm_epsilon != kGptNormEpsilon) parts.push_back(fmt::format("norm_epsilon {}", norm_epsilon));
  if (mlp != MlpKind::kGelu) parts.push_back(to_string(mlp));
  if (position != PositionKind::kLearned) parts.push_back(to_string(position));
  if (rope_scaling) parts.push_back(fmt::format("rope_scaling x{}", rope_scaling->factor));
  if (kv_head_count() != heads) parts.push_back(fmt::format("kv_heads {}", kv_head_count()));
  if (!tied_output) parts.push_back("untied output");
  if (!biases) parts.push_back("no biases");
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::int64_t ModelSpec::params_per_layer() const {
  return local_param_count(layer_tensor_specs(*this), *this, TpShape{});
}

std::int64_t ModelSpec::embedding_params() const {
  return local_param_count(embedding_tensor_specs(*this), *this, TpShape{});
}

std::int64_t ModelSpec::final_norm_params() const {
  return local_param_count(final_norm_tensor_specs(*this), *this, TpShape{});
}

std::int64_t ModelSpec::output_params() const {
  return local_param_count(output_tensor_specs(*this), *this, TpShape{});
}

std::int64_t ModelSpec::total_params() const {
  return layers * params_per_layer() + embedding_params() + final_norm_params() + output_params();
}

}  // namespace strata
