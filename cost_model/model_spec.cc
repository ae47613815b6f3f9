// ModelSpec loading, validation and exact parameter counts; see model_spec.h.
// Does not know about parallelism: per-rank shards (tp, pp) are the memory model's job.
#include "cost_model/model_spec.h"

#include <fmt/format.h>

#include "cost_model/errors.h"
#include "cost_model/limits.h"

namespace strata {

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
  // ffn_hidden is the one optional key: nearly every GPT uses 4h, and writing it in every
  // config would only invite copies that disagree with hidden.
  m.ffn_hidden = r.get_int_or("ffn_hidden", 4 * m.hidden);
  r.require_positive("ffn_hidden", static_cast<double>(m.ffn_hidden));
  r.require_at_most("ffn_hidden", static_cast<double>(m.ffn_hidden), limits::kFfnHidden);
  if (m.hidden % m.heads != 0) {
    r.fail("hidden", std::to_string(m.hidden),
           fmt::format("a multiple of heads = {} (hidden % heads = {})", m.heads,
                       m.hidden % m.heads));
  }
  r.finish();
  return m;
}

ModelSpec ModelSpec::load(const std::string& path) { return from_json(read_json_file(path), path); }

Json ModelSpec::to_json() const {
  // ffn_hidden is always written so that a saved spec says what it means on its own.
  return Json{{"name", name},          {"layers", layers}, {"hidden", hidden},
              {"heads", heads},        {"seq_len", seq_len}, {"vocab", vocab},
              {"ffn_hidden", ffn_hidden}};
}

std::int64_t ModelSpec::params_per_layer() const {
  const std::int64_t h = hidden;
  const std::int64_t f = ffn_hidden;
  const std::int64_t qkv = h * 3 * h + 3 * h;        // fused Q,K,V projection and bias
  const std::int64_t attn_out = h * h + h;           // attention output projection and bias
  const std::int64_t mlp = h * f + f + f * h + h;    // h->f and f->h with biases
  const std::int64_t norms = 2 * 2 * h;              // two LayerNorms, gain and bias each
  return qkv + attn_out + mlp + norms;
}

std::int64_t ModelSpec::embedding_params() const { return vocab * hidden + seq_len * hidden; }

std::int64_t ModelSpec::final_norm_params() const { return 2 * hidden; }

std::int64_t ModelSpec::total_params() const {
  return layers * params_per_layer() + embedding_params() + final_norm_params();
}

}  // namespace strata
