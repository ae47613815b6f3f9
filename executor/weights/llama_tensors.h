// Hugging Face Llama's tensor names (transformers' LlamaForCausalLM, also Mistral's and
// Qwen 2's layout) for a strata model, derived from layer_tensors.h's description:
//   model.embed_tokens.weight (V, h)
//   model.layers.N.input_layernorm.weight (h)            <- ln1_w
//   model.layers.N.self_attn.{q,k,v}_proj.weight         <- rows of q_w | kv_w (K then V),
//                                                            or of the fused qkv_w (Q, K, V)
//   model.layers.N.self_attn.o_proj.weight (h, h)        <- proj_w
//   model.layers.N.post_attention_layernorm.weight (h)   <- ln2_w
//   model.layers.N.mlp.{gate,up}_proj.weight (f, h)      <- rows of fc_w (gate, then up)
//   model.layers.N.mlp.down_proj.weight (h, f)           <- fc2_w
//   model.norm.weight (h), lm_head.weight (V, h)         <- lnf_w, lm_head (absent when tied)
// and the same names with ".bias" for a model with biases (attention_bias / mlp_bias).
// All are nn.Linear's (out, in), strata's layout: nothing is transposed.
//
// Rotary pairing: transformers' Llama rotates dims (i, i + d/2) of each head (rotate_half);
// Meta's original checkpoints pair (2i, 2i + 1), and transformers' conversion script
// permuted q_proj's and k_proj's rows so that rotate_half gives the same attention.
// strata's RoPE kernels (kernels/cpu/rope.h, kernels/cuda/rope.h) pair (i, i + d/2) too, so
// Hugging Face's q_proj and k_proj rows load as they are: the conversion is the identity, and
// this comment is where it would go if a kernel ever paired adjacent dims.
// Deliberately not here: reading or writing files (hf_checkpoint.h, weights_io.h).
#pragma once

#include <string>
#include <vector>

#include "cost_model/specs/model_spec.h"
#include "executor/weights/hf_tensor.h"

namespace strata::weights {

// Every parameter of the model: embedding, layers, final norm, untied output layer.
// ConfigError unless the model is RMSNorm, SwiGLU and rotary (what the names mean).
std::vector<HfTensor> llama_tensors(const ModelSpec& model);

// Tensors a Llama file may hold that are not parameters, skipped on load: lm_head.weight of
// a tied model (some tied checkpoints keep the copy) and older checkpoints' rotary buffers
// (model.layers.N.self_attn.rotary_emb.inv_freq).
bool is_ignored_llama_tensor(const std::string& name, const ModelSpec& model);

}  // namespace strata::weights
