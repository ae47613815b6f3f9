// ModelSpec: the shape of a decoder-only transformer and the choices that make its family.
// GPT-2 is the default of every choice (pre-LayerNorm with biases, GeLU MLP, learned
// positions, as many KV heads as query heads, output layer tied to the embedding), so a
// config that names none of them is today's GPT; Llama 3 names them all (RMSNorm, SwiGLU,
// rotary positions, 8 KV heads, untied output, no biases). Loaded from configs/models/*.json.
// The tensors these choices give a layer are described once in cost_model/specs/layer_tensors.h;
// every count (parameters, FLOPs) is read from there.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cost_model/specs/json_reader.h"

namespace strata {

enum class NormKind { kLayerNorm, kRmsNorm };
enum class MlpKind { kGelu, kSwiglu };
enum class PositionKind { kLearned, kRope };

std::string to_string(NormKind kind);
std::string to_string(MlpKind kind);
std::string to_string(PositionKind kind);

// Llama 3.1's rope_scaling (Hugging Face config.json's, rope_type "llama3"): the long
// wavelengths of RoPE stretched by `factor` for a context past the pretraining one. The
// formula is kernels/rope_frequency.h's; the published values of Llama 3.1 8B/70B/405B are
// factor 8, low 1, high 4, original 8192.
struct RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 8192;
  bool operator==(const RopeScaling&) const = default;
};

struct ModelSpec {
  std::string name;
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t seq_len = 0;
  std::int64_t vocab = 0;
  std::int64_t ffn_hidden = 0;  // optional in JSON; default 4 * hidden

  // The family's choices (all optional in JSON; the defaults are GPT-2's).
  NormKind norm = NormKind::kLayerNorm;
  double norm_epsilon = 1e-5;        // GPT-2's layer_norm_epsilon and Llama 3's rms_norm_eps
  MlpKind mlp = MlpKind::kGelu;      // swiglu: ffn_hidden is the width of gate and up each
  PositionKind position = PositionKind::kLearned;
  double rope_theta = 10000.0;       // only with position = rope (RoFormer's base)
  std::optional<RopeScaling> rope_scaling;  // only with position = rope; absent: unscaled
  std::int64_t kv_heads = 0;         // key/value heads; default (0 in JSON: absent) = heads
  bool tied_output = true;           // output layer = token embedding
  bool biases = true;                // biases on the linear layers and LayerNorms

  // Rejects unknown/missing keys, wrong types and impossible values (hidden % heads != 0,
  // heads % kv_heads != 0, rope with an odd head_dim, non-positive sizes, a rope_scaling
  // with factor < 1, low_freq_factor >= high_freq_factor or an unknown key); messages name
  // `source`, the key, the value and what was expected.
  static ModelSpec from_json(const Json& json, const std::string& source);
  static ModelSpec load(const std::string& path);
  // Writes the family keys only when some choice differs from GPT-2's, so every GPT config
  // round-trips unchanged; then it writes all of them (rope_theta only with rope,
  // rope_scaling only when present).
  Json to_json() const;

  bool operator==(const ModelSpec&) const = default;

  std::int64_t head_dim() const { return hidden / heads; }
  std::int64_t kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  // Every choice is GPT-2's (what the executor runs today).
  bool is_gpt_family() const;
  // "gpt", or the choices that differ from it ("rmsnorm, swiglu, rope, kv_heads 8, untied
  // output, no biases") for messages.
  std::string family_name() const;

  // Parameter counts, all read from layer_tensors.h's description (tensor parallelism 1).
  std::int64_t params_per_layer() const;
  // Token embedding (V h) plus learned positions (s h) when the positions are learned.
  std::int64_t embedding_params() const;
  // The final norm (2 h with a LayerNorm and biases, h otherwise).
  std::int64_t final_norm_params() const;
  // The untied output layer (V h), 0 when tied.
  std::int64_t output_params() const;
  // layers * params_per_layer + embedding + final norm + output. For GPT-2 this is the
  // published P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)) plus the final norm's 2h.
  std::int64_t total_params() const;
};

}  // namespace strata
