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

// Each step's loss and global gradient norm (before clipping).
struct ReferenceSteps {
  std::vector<double> losses, grad_norms;
};

inline ReferenceSteps read_reference() {
  std::ifstream in(reference_path());
  const nlohmann::json j = nlohmann::json::parse(in);
  return {j.at("losses").get<std::vector<double>>(), j.at("grad_norms").get<std::vector<double>>()};
}

// How far the CUDA backend (bf16 activations and weight copies, fp32 master, gradients and
// moments) may be from the fp32 CPU reference at step s, relative. Step 0 has seen no update:
// its loss is a mean over 1024 tokens of bf16-rounded logits (each term off by up to 2^-9 =
// 2e-3 with random signs, so the mean by well under that): 5e-3; its gradient norm sums
// squares of bf16-rounded products, 2e-2. A forward that returned zero logits would give
// ln 256 = 5.545 against the reference's 5.537 (1.5e-3 off, inside 5e-3 since issue 25's
// pair draw moved the reference from 5.492; the loss no longer tells it apart) and a
// gradient norm of the embedding alone, which only the norm's bound is left to catch (how far
// that norm lies from the reference's 6.46 has not been measured). Later steps add Adam's normalised updates of the rounded
// gradients, which let differences grow (measured on an H200 with the former engine: losses
// within 2e-2 over 8 steps): 1e-2 at steps 1-2, 2e-2 after; norms 5e-2.
inline double reference_loss_tolerance(int step) { return step == 0 ? 5e-3 : step <= 2 ? 1e-2 : 2e-2; }
inline double reference_norm_tolerance(int step) { return step == 0 ? 2e-2 : 5e-2; }

}  // namespace strata::testing_support
