// GPT-2 names and layouts (see gpt2_tensors.h).
#include "executor/weights/gpt2_tensors.h"

namespace strata::weights {

std::vector<HfTensor> gpt2_tensors(const ModelSpec& model) {
  const std::int64_t h = model.hidden, f = model.ffn_hidden;
  std::vector<HfTensor> t;
  t.push_back({"wte.weight", {model.vocab, h}, "embedding", "wte", false});
  t.push_back({"wpe.weight", {model.seq_len, h}, "embedding", "wpe", false});
  for (std::int64_t i = 0; i < model.layers; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    const std::string u = "layer" + std::to_string(i);
    t.push_back({p + "ln_1.weight", {h}, u, "ln1_w", false});
    t.push_back({p + "ln_1.bias", {h}, u, "ln1_b", false});
    t.push_back({p + "attn.c_attn.weight", {h, 3 * h}, u, "qkv_w", true});
    t.push_back({p + "attn.c_attn.bias", {3 * h}, u, "qkv_b", false});
    t.push_back({p + "attn.c_proj.weight", {h, h}, u, "proj_w", true});
    t.push_back({p + "attn.c_proj.bias", {h}, u, "proj_b", false});
    t.push_back({p + "ln_2.weight", {h}, u, "ln2_w", false});
    t.push_back({p + "ln_2.bias", {h}, u, "ln2_b", false});
    t.push_back({p + "mlp.c_fc.weight", {h, f}, u, "fc_w", true});
    t.push_back({p + "mlp.c_fc.bias", {f}, u, "fc_b", false});
    t.push_back({p + "mlp.c_proj.weight", {f, h}, u, "fc2_w", true});
    t.push_back({p + "mlp.c_proj.bias", {h}, u, "fc2_b", false});
  }
  t.push_back({"ln_f.weight", {h}, "final_norm", "lnf_w", false});
  t.push_back({"ln_f.bias", {h}, "final_norm", "lnf_b", false});
  return t;
}

bool is_ignored_gpt2_tensor(const std::string& name) {
  const auto ends = [&](const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return name == "lm_head.weight" || ends(".attn.bias") || ends(".attn.masked_bias");
}

}  // namespace strata::weights
