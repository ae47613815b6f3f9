// The choice of a model's Hugging Face name table (see hf_tensor.h).
#include "executor/weights/hf_tensor.h"

#include "executor/weights/gpt2_tensors.h"
#include "executor/weights/llama_tensors.h"

namespace strata::weights {

HfNames hf_names(const ModelSpec& model) {
  if (model.is_gpt_family()) {
    return {"GPT-2", gpt2_tensors(model), "transformer.",
            [](const std::string& name, const ModelSpec&) { return is_ignored_gpt2_tensor(name); }};
  }
  return {"Llama", llama_tensors(model), "", is_ignored_llama_tensor};
}

}  // namespace strata::weights
