// Hugging Face GPT-2's tensor names and layouts for a strata model, the one place that maps
// them (../shared/reference/formats.md): wte.weight (V, h), wpe.weight (s, h), per layer i
// h.i.ln_1.{weight,bias}, h.i.attn.c_attn.{weight (h, 3h), bias}, h.i.attn.c_proj,
// h.i.ln_2, h.i.mlp.c_fc (h, f), h.i.mlp.c_proj (f, h), and ln_f. GPT-2's Conv1D stores a
// weight as (in, out); strata's are (out, in) (the nn.Linear layout), hence `transposed`.
// The q, k, v order of c_attn's output columns and the head order inside each are the same
// on both sides. The output layer is tied to wte on both sides.
// Deliberately not here: reading or writing files (hf_checkpoint.h, weights_io.h).
#pragma once

#include <string>
#include <vector>

#include "cost_model/specs/model_spec.h"
#include "executor/weights/hf_tensor.h"

namespace strata::weights {

// Every parameter of the model, in the order the file lays them out.
std::vector<HfTensor> gpt2_tensors(const ModelSpec& model);

// Tensors a GPT-2 file may hold that are not parameters, skipped on load: the tied
// lm_head.weight and the causal-mask buffers (h.i.attn.bias, h.i.attn.masked_bias).
bool is_ignored_gpt2_tensor(const std::string& name);

}  // namespace strata::weights
