// ModelSpec: the shape of a GPT-style decoder (pre-LayerNorm, learned positions, GeLU MLP,
// tied input/output embedding). Loaded from configs/models/*.json; every count is exact
// for the executor's model, so the memory model can predict its bytes.
#pragma once

#include <cstdint>
#include <string>

#include "cost_model/json_reader.h"

namespace strata {

struct ModelSpec {
  std::string name;
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t seq_len = 0;
  std::int64_t vocab = 0;
  std::int64_t ffn_hidden = 0;  // optional in JSON; default 4 * hidden

  // Rejects unknown/missing keys, wrong types and impossible values (hidden % heads != 0,
  // non-positive sizes); messages name `source` and the key.
  static ModelSpec from_json(const Json& json, const std::string& source);
  static ModelSpec load(const std::string& path);
  Json to_json() const;

  bool operator==(const ModelSpec&) const = default;

  std::int64_t head_dim() const { return hidden / heads; }

  // Parameters of one transformer layer: QKV and output projections with biases, the MLP
  // with biases, two LayerNorms (gain and bias). 12 h^2 + 13 h when ffn_hidden = 4 h.
  std::int64_t params_per_layer() const;
  // Token embedding (V h, tied with the output layer) plus learned positions (s h).
  std::int64_t embedding_params() const;
  // The final LayerNorm (2 h).
  std::int64_t final_norm_params() const;
  // Everything: layers * params_per_layer + embedding + final norm. Equals the published
  // P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)) plus the final norm's 2h.
  std::int64_t total_params() const;
};

}  // namespace strata
