// TrainSpec: what is trained and how: global batch (sequences per step), precision, the
// optimizer and its hyper-parameters (with the LR schedule and which tensors weight decay
// applies to: cost_model/specs/optimizer_schedule.h computes both), seed, steps.
#pragma once

#include <cstdint>
#include <string>

#include "cost_model/specs/json_reader.h"

namespace strata {

enum class Precision { kBf16, kFp32 };

struct OptimizerSpec {
  std::string name = "adamw";  // the only optimizer so far
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 0.0;  // global-norm clipping; 0 = off
  // The LR schedule, with Megatron-LM's names; every key optional, absent = a constant lr.
  enum class DecayStyle { kConstant, kLinear, kCosine };
  std::int64_t lr_warmup_steps = 0;          // linear warmup from 0 to lr over these steps
  DecayStyle lr_decay_style = DecayStyle::kConstant;  // JSON "constant" | "linear" | "cosine"
  std::int64_t lr_decay_steps = 0;           // the decay ends here (0: the run's last step)
  double min_lr = 0.0;                       // where linear / cosine decay ends
  // Weight decay on vectors (biases, LayerNorm gains and biases) as well as matrices. Off:
  // the common convention (GPT-2, Megatron, nanoGPT) decays matrices and embeddings only.
  bool decay_biases_and_norms = false;
};

struct TrainSpec {
  std::int64_t global_batch = 0;  // sequences per optimizer step
  Precision precision = Precision::kBf16;  // JSON "bf16" | "fp32"
  // JSON object "optimizer": {name, lr, beta1, beta2, eps, weight_decay[, grad_clip,
  // lr_warmup_steps, lr_decay_style, lr_decay_steps, min_lr, decay_biases_and_norms]}
  OptimizerSpec optimizer;
  std::uint64_t seed = 0;
  std::int64_t steps = 0;

  static TrainSpec from_json(const Json& json, const std::string& source);
  static TrainSpec load(const std::string& path);
  Json to_json() const;

  // Bytes of one parameter/activation element in compute precision (2 for bf16, 4 for fp32).
  int compute_bytes() const { return precision == Precision::kBf16 ? 2 : 4; }
};

std::string to_string(Precision precision);
std::string to_string(OptimizerSpec::DecayStyle style);

}  // namespace strata
