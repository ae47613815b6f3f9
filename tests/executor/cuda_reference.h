// The CPU backend's losses that the CUDA backend is held to (tests/executor/data/
// cuda_reference_losses.json): the model, training setup and plan both sides run, and the
// file's reader. cuda_reference_cpu_test (CPU, every CI run) recomputes the losses with the
// CPU engine and fails when they drift from the file (STRATA_UPDATE_GOLDEN=1 rewrites it);
// cuda_engine_gpu_test compares the CUDA engine's losses with the file on a lent GPU, where
// no MPI runtime exists to run the CPU engine beside it.
// The model is tiny-gpu (head size 64: a size the CUDA attention kernel is built for); the
// training setup is tiny's with bf16 precision and clipping on, so the norm path runs too.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cost_model/model_spec.h"
#include "cost_model/plan.h"
#include "cost_model/train_spec.h"

namespace strata::testing_support {

inline constexpr int kReferenceSteps = 8;

inline ModelSpec reference_model() {
  return ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/tiny-gpu.json");
}

inline TrainSpec reference_train() {
  TrainSpec train = TrainSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/train/tiny.json");
  train.precision = Precision::kBf16;
  train.optimizer.grad_clip = 1.0;
  train.optimizer.weight_decay = 0.1;
  return train;
}

inline std::string reference_path() {
  return std::string(STRATA_SOURCE_DIR) + "/tests/executor/data/cuda_reference_losses.json";
}

inline std::vector<double> read_reference_losses() {
  std::ifstream in(reference_path());
  const nlohmann::json j = nlohmann::json::parse(in);
  return j.at("losses").get<std::vector<double>>();
}

}  // namespace strata::testing_support
