// Keeps tests/executor/data/cuda_reference_losses.json honest: the CPU engine's losses for
// the reference setup (cuda_reference.h) on a single rank must equal the file's. The CPU
// backend gives the same losses for every plan (the equivalence matrix), so one plan
// stands for all. STRATA_UPDATE_GOLDEN=1 rewrites the file instead of comparing.
#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

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
  const std::vector<double> losses = run_losses(model, train, plan, *world, kReferenceSteps, corpus);
  if (const char* update = std::getenv("STRATA_UPDATE_GOLDEN"); update && *update == '1') {
    nlohmann::json j;
    j["source"] = "CPU backend (fp32), single rank, plan " + plan.label() +
                  "; model configs/models/tiny-gpu.json; train configs/train/tiny.json with "
                  "precision bf16, grad_clip 1.0, weight_decay 0.1 (tests/executor/cuda_reference.h)";
    j["losses"] = losses;
    std::ofstream(reference_path()) << j.dump(2) << "\n";
    GTEST_SKIP() << "rewrote " << reference_path();
  }
  const std::vector<double> expected = read_reference_losses();
  ASSERT_EQ(expected.size(), losses.size());
  for (std::size_t i = 0; i < losses.size(); ++i) {
    // The CPU engine is deterministic; 1e-6 leaves room for another BLAS's summation order.
    EXPECT_NEAR(losses[i], expected[i], 1e-6 * expected[i]) << "step " << i;
  }
  // The setup must train: the loss falls over the reference steps.
  EXPECT_LT(losses.back(), losses.front());
}

}  // namespace
}  // namespace strata::testing_support
