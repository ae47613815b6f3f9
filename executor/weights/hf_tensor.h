// One tensor of a Hugging Face checkpoint and where it lives in strata's parameters: the
// record every family's name table (gpt2_tensors.h, llama_tensors.h) is a list of, and the
// choice of table for a model (hf_tensors), made here once.
//
// A strata segment may be several Hugging Face tensors stacked by rows: Llama's separate
// q_proj, k_proj, v_proj are the parts of strata's fused qkv_w (or k_proj, v_proj of kv_w),
// gate_proj and up_proj those of fc_w (layer_tensors.h). `first_row` says where in the
// segment's full (rows, cols) tensor this one's rows begin.
// Deliberately not here: reading or writing files (hf_checkpoint.h, weights_io.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/specs/model_spec.h"

namespace strata::weights {

struct HfTensor {
  std::string name;                 // "h.3.attn.c_attn.weight", "model.layers.3.self_attn.k_proj.weight"
  std::vector<std::int64_t> shape;  // Hugging Face's shape
  std::string unit;                 // strata's unit: "embedding", "layer3", "final_norm", "output"
  std::string segment;              // strata's tensor in it: "qkv_w"
  bool transposed = false;          // HF (in, out) = strata's (out, in) transposed (GPT-2's Conv1D)
  std::int64_t first_row = 0;       // first row of `segment`'s full tensor this tensor fills

  // strata's (rows, cols) of this tensor; a vector is (n, 1).
  std::int64_t rows() const { return transposed ? shape[1] : shape[0]; }
  std::int64_t cols() const {
    if (shape.size() < 2) return 1;
    return transposed ? shape[0] : shape[1];
  }
  // Element (row, col) of strata's full segment, row in [first_row, first_row + rows()):
  // its index in a file tensor of shape `file_shape` (the file's wpe may hold more
  // positions than the model's; its rows are strata's rows, so the row-major index holds).
  std::int64_t file_index(const std::vector<std::int64_t>& file_shape, std::int64_t row,
                          std::int64_t col) const {
    const std::int64_t r = row - first_row;
    if (transposed) return col * file_shape[1] + r;  // HF (in, out): in = strata's column
    const std::int64_t file_cols = file_shape.size() == 2 ? file_shape[1] : 1;
    return r * file_cols + col;
  }
};

// A model's Hugging Face names: GPT-2's for the GPT family, Llama's (LlamaForCausalLM) for
// RMSNorm + SwiGLU + rotary models; a ConfigError naming the model and its family for any
// other mix of choices (no Hugging Face architecture to name its tensors after).
struct HfNames {
  std::string family;                // "GPT-2", "Llama": for messages
  std::vector<HfTensor> tensors;     // every parameter, in the order a written file lays them out
  std::string optional_prefix;       // a prefix a file's names may carry ("transformer." for GPT2LMHeadModel)
  bool (*ignored)(const std::string& name, const ModelSpec& model) = nullptr;  // non-parameters skipped on load
};

HfNames hf_names(const ModelSpec& model);

}  // namespace strata::weights
