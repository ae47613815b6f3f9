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

#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/train_spec.h"

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
// that norm lies from the reference's 6.46 has not been measured). Later steps add Adam's
// normalised updates of the rounded gradients, which let differences grow: losses 1e-2 at
// steps 1-2, 2e-2 after; norms 5e-2, or more where the trajectory itself is ill-conditioned:
//
// How much a correct engine's norm moves at step s when its weights are rounded as bf16 rounds
// them, measured on the CPU (cuda_reference_cpu_test.cc, CudaReference.NormBoundsCover...):
// the reference run from initial weights each multiplied by (1 + 2^-9 u), u uniform in
// [-1, 1], 6 seeds, relative to the file's norms. RMS over the seeds (AMD EPYC, AVX-512, GCC
// 12, OpenBLAS 0.3.21; 2026-11-28):
//   step      0       1       2       3       4       5       6       7
//   norm   1.6e-4  3.2e-4  1.1e-3  1.4e-3  1.6e-2  5.7e-3  5.7e-2  1.5e-2
//   loss   <3e-5   <6e-5   <8e-5   <2e-4   <2e-4   <1.3e-3 <9e-4   <1e-3   (largest)
// Step 6's norm (2.63, a bump between 2.50 and 2.50) moves by 5.7% RMS, 10.4% at worst, from
// one such rounding of the initial weights: its neighbours' by 0.6% and 1.5%. A GPU run rounds
// at least as much (every weight copy and activation, every step), so a correct CUDA engine's
// step-6 norm may be this far from the file's: the H200 gave 5.1-6.0% below it on four
// one-GPU plans (GPipe with ZeRO-3, a single micro-batch of 8, two optimizers on the CPU),
// within one sigma, and every other step of the same runs passed 5e-2. So the bound is the
// larger of the rounding bound above and 3 sigma of this spread, rounded up: step 6's is
// 3 x 5.7% = 17% -> 0.2; every other step's 3 sigma is under 5e-2 (step 4: 4.8%). The loss
// bounds hold at every step with 3 sigma of the loss spread far below them (4e-3 at most).
// The CPU test reruns the 6 seeds and fails if 3 sigma outgrows a bound.
inline constexpr double kReferenceNormTolerance[kReferenceSteps] = {2e-2, 5e-2, 5e-2, 5e-2,
                                                                    5e-2, 5e-2, 0.2,  5e-2};
inline double reference_loss_tolerance(int step) { return step == 0 ? 5e-3 : step <= 2 ? 1e-2 : 2e-2; }
inline double reference_norm_tolerance(int step) { return kReferenceNormTolerance[step]; }

}  // namespace strata::testing_support
