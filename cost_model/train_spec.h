// TrainSpec: what is trained and how: global batch (sequences per step), precision, the
// optimizer and its hyper-parameters, seed, steps.
#pragma once

#include <cstdint>
#include <string>

#include "cost_model/json_reader.h"

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
};

struct TrainSpec {
  std::int64_t global_batch = 0;  // sequences per optimizer step
  Precision precision = Precision::kBf16;  // JSON "bf16" | "fp32"
  OptimizerSpec optimizer;        // JSON object "optimizer": {name, lr, beta1, beta2, eps, weight_decay[, grad_clip]}
  std::uint64_t seed = 0;
  std::int64_t steps = 0;

  static TrainSpec from_json(const Json& json, const std::string& source);
  static TrainSpec load(const std::string& path);
  Json to_json() const;

  // Bytes of one parameter/activation element in compute precision (2 for bf16, 4 for fp32).
  int compute_bytes() const { return precision == Precision::kBf16 ? 2 : 4; }
};

std::string to_string(Precision precision);

}  // namespace strata
