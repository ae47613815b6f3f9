// Llama names (see llama_tensors.h), read off layer_tensors.h's tensors.
#include "executor/weights/llama_tensors.h"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/layer_tensors.h"

namespace strata::weights {
namespace {

// strata's tensor -> the Hugging Face tensors stacked in its rows, in order (one per part).
struct NameRow {
  const char* segment;
  std::vector<const char*> parts;
};

const std::vector<NameRow>& layer_names() {
  static const std::vector<NameRow> names = {
      {"ln1_w", {"input_layernorm.weight"}},
      {"qkv_w", {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}},
      {"qkv_b", {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"}},
      {"q_w", {"self_attn.q_proj.weight"}},
      {"q_b", {"self_attn.q_proj.bias"}},
      {"kv_w", {"self_attn.k_proj.weight", "self_attn.v_proj.weight"}},
      {"kv_b", {"self_attn.k_proj.bias", "self_attn.v_proj.bias"}},
      {"proj_w", {"self_attn.o_proj.weight"}},
      {"proj_b", {"self_attn.o_proj.bias"}},
      {"ln2_w", {"post_attention_layernorm.weight"}},
      {"fc_w", {"mlp.gate_proj.weight", "mlp.up_proj.weight"}},
      {"fc_b", {"mlp.gate_proj.bias", "mlp.up_proj.bias"}},
      {"fc2_w", {"mlp.down_proj.weight"}},
      {"fc2_b", {"mlp.down_proj.bias"}},
  };
  return names;
}

const std::vector<NameRow>& other_names() {
  static const std::vector<NameRow> names = {
      {"wte", {"model.embed_tokens.weight"}},
      {"lnf_w", {"model.norm.weight"}},
      {"lm_head", {"lm_head.weight"}},
  };
  return names;
}

// The tensors of `specs` in `unit`, each spec split into its parts' Hugging Face tensors.
void add_unit(std::vector<HfTensor>& out, const TensorSpecs& specs, const std::vector<NameRow>& names,
              const std::string& prefix, const std::string& unit) {
  for (const TensorSpec& s : specs) {
    const NameRow* row = nullptr;
    for (const NameRow& r : names) {
      if (std::strcmp(r.segment, s.name) == 0) row = &r;
    }
    if (row == nullptr || static_cast<std::int64_t>(row->parts.size()) != s.parts) {
      throw std::logic_error(fmt::format("llama_tensors: no Hugging Face name for {}.{} ({} parts)",
                                         unit, s.name, s.parts));
    }
    const std::int64_t part_rows = s.rows / s.parts;
    for (std::int64_t k = 0; k < s.parts; ++k) {
      HfTensor t;
      t.name = prefix + row->parts[static_cast<std::size_t>(k)];
      t.shape = s.cols > 1 ? std::vector<std::int64_t>{part_rows, s.cols}
                           : std::vector<std::int64_t>{part_rows};
      t.unit = unit;
      t.segment = s.name;
      t.first_row = k * part_rows;
      out.push_back(std::move(t));
    }
  }
}

}  // namespace

std::vector<HfTensor> llama_tensors(const ModelSpec& model) {
  // What the names mean in transformers: a Llama layer is RMSNorm, SwiGLU and rotary; a
  // LayerNorm, a GeLU MLP or learned positions would load into a different computation.
  if (model.norm != NormKind::kRmsNorm || model.mlp != MlpKind::kSwiglu ||
      model.position != PositionKind::kRope) {
    throw ConfigError(fmt::format(
        "model {} (family \"{}\"): Hugging Face weights names exist for GPT-2 (layernorm, gelu, "
        "learned positions, tied, biases) and Llama (rmsnorm, swiglu, rope); this mix has neither",
        model.name, model.family_name()));
  }
  std::vector<HfTensor> out;
  add_unit(out, embedding_tensor_specs(model), other_names(), "", "embedding");
  for (std::int64_t i = 0; i < model.layers; ++i) {
    add_unit(out, layer_tensor_specs(model), layer_names(),
             "model.layers." + std::to_string(i) + ".", "layer" + std::to_string(i));
  }
  add_unit(out, final_norm_tensor_specs(model), other_names(), "", "final_norm");
  add_unit(out, output_tensor_specs(model), other_names(), "", "output");
  return out;
}

bool is_ignored_llama_tensor(const std::string& name, const ModelSpec& model) {
  const std::string buffer = ".self_attn.rotary_emb.inv_freq";
  const bool rotary_buffer = name.size() > buffer.size() &&
                             name.compare(name.size() - buffer.size(), buffer.size(), buffer) == 0;
  return rotary_buffer || (model.tied_output && name == "lm_head.weight");
}

}  // namespace strata::weights
