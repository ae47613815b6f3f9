// Keeps tests/executor/data/cuda_reference_losses.json honest: the CPU engine's losses for
// the reference setup (cuda_reference.h) on a single rank must equal the file's. The CPU
// backend gives the same losses for every plan (the equivalence matrix), so one plan
// stands for all. STRATA_UPDATE_GOLDEN=1 rewrites the file instead of comparing.
#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine_mpi_environment.h"
#include "engine_test_support.h"
#include "cuda_reference.h"

namespace strata::testing_support {
namespace {

TEST(CudaReference, CpuLossesMatchTheFile) {
  const ModelSpec model = reference_model();
  const TrainSpec train = reference_train();
  const Plan plan = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 0, 2);
  auto world = MpiCommunicator::duplicate(MPI_COMM_SELF);
  const auto corpus = data::generated_corpus(train.seed, data::kGeneratedCorpusBytes);
  const StepValues got = run_steps(model, train, plan, *world, kReferenceSteps, corpus);
  const std::vector<double>& losses = got.losses;
  if (const char* update = std::getenv("STRATA_UPDATE_GOLDEN"); update && *update == '1') {
    nlohmann::json j;
    j["source"] = "CPU backend (fp32), single rank, plan " + plan.label() +
                  "; model configs/models/tiny-gpu.json; train configs/train/tiny.json with "
                  "precision bf16, grad_clip 1.0, weight_decay 0.1 (tests/executor/cuda_reference.h)";
    j["losses"] = losses;
    j["grad_norms"] = got.grad_norms;
    std::ofstream(reference_path()) << j.dump(2) << "\n";
    GTEST_SKIP() << "rewrote " << reference_path();
  }
  const ReferenceSteps expected = read_reference();
  ASSERT_EQ(expected.losses.size(), losses.size());
  ASSERT_EQ(expected.grad_norms.size(), losses.size());
  for (std::size_t i = 0; i < losses.size(); ++i) {
    // The CPU engine is deterministic on one machine; another CPU's BLAS sums in another
    // order: the file written on an Intel AVX-512 machine and this one's on an AMD EPYC
    // (OpenBLAS 0.3.21) differed by up to 1.05e-6 (the step-6 loss), so 1e-5.
    EXPECT_NEAR(losses[i], expected.losses[i], 1e-5 * expected.losses[i]) << "step " << i;
    EXPECT_NEAR(got.grad_norms[i], expected.grad_norms[i], 1e-5 * expected.grad_norms[i])
        << "step " << i;
  }
  // The setup must train: the loss falls over the reference steps.
  EXPECT_LT(losses.back(), losses.front());
}

}  // namespace
}  // namespace strata::testing_support
