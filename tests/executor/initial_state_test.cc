// The initial parameters and the first steps of a seeded run, pinned to the values of the
// code before issue 25's set-up work (commit 56c2b8c): that work changes where and how the
// parameters are drawn and how fresh memory is obtained, never what a run computes. Each
// expected value below was printed by this test's own loop at that commit (run with the
// expectations removed); a change of any bit of any initial parameter, of the first two
// losses and gradient norms, or of the parameters after the first AdamW step fails it.
// One OpenMP and one OpenBLAS thread, so that the recorded bits are every machine's (the
// losses' last bits depend on the thread count; the initial parameters do not, which
// param_init_test checks). Here the whole engine (allocation, drawing, copies) sits between
// the seed and the numbers.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "executor/data/corpus.h"
#include "executor/engine/rank_training.h"
#include "kernels/cpu/gemm.h"
#include "tests/executor/engine_mpi_environment.h"
#include "tests/executor/engine_test_support.h"

namespace strata {
namespace {

using testing_support::make_plan;

// FNV-1a over the float bits of every unit's full parameters, in unit order.
std::uint64_t params_hash(engine::ModelState& state) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (std::size_t u = 0; u < state.size(); ++u) {
    for (const float f : state.full_params(state.unit(u).layout.name)) {
      std::uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      for (int b = 0; b < 4; ++b) {
        h ^= (bits >> (8 * b)) & 0xFFu;
        h *= 0x100000001B3ull;
      }
    }
  }
  return h;
}

struct Observed {
  std::uint64_t initial = 0, after_first_step = 0;
  std::vector<double> losses, grad_norms;
};

Observed observe(const Plan& plan) {
  const ModelSpec model = testing_support::tiny_model();
  const TrainSpec train = testing_support::tiny_train();
  plan.check_against_model(model, train, "initial state test plan");
  const auto corpus = data::generated_corpus(train.seed, 1 << 16);
  auto world = MpiCommunicator::duplicate(MPI_COMM_SELF);
  engine::RankTraining rank(model, train, plan, *world, TierBudgets{},
                            data::TokenView::of_bytes(corpus), engine::OffloadOptions{},
                            engine::cpu_backend_maker());
  Observed o;
  o.initial = params_hash(rank.engine().state());
  for (int s = 0; s < 2; ++s) {
    const auto r = rank.engine().step(s);
    o.losses.push_back(r.loss);
    o.grad_norms.push_back(r.grad_norm);
    if (s == 0) o.after_first_step = params_hash(rank.engine().state());
  }
  return o;
}

// Restores the OpenMP thread count; OpenBLAS goes back to its own default afterwards.
class OneThread {
 public:
  OneThread() : saved_(omp_get_max_threads()) {
    omp_set_num_threads(1);
    kernels::cpu::set_blas_threads(1);
  }
  ~OneThread() {
    omp_set_num_threads(saved_);
    kernels::cpu::set_blas_threads(saved_);
  }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;
};

// The values of the tiny model under the tiny training spec (seed 1234) at 56c2b8c.
constexpr std::uint64_t kInitialParams = 0x363046122e07cf74ull;  // any plan: the same values
constexpr double kFirstLoss = 0x1.643f20fcp+2;   // 5.566...: about ln(256) = 5.545 at the start
constexpr double kSecondLoss = 0x1.51de85abp+2;

TEST(InitialState, TinySingleRankAsBeforeIssue25) {
  const OneThread one;
  const Observed o = observe(make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 0, 2));
  EXPECT_EQ(o.initial, kInitialParams);
  EXPECT_EQ(o.losses, (std::vector<double>{kFirstLoss, kSecondLoss}));
  EXPECT_EQ(o.grad_norms, (std::vector<double>{0x1.5055d323f9584p+2, 0x1.3335cb537ec14p+1}));
  EXPECT_EQ(o.after_first_step, 0x5711a5325ad1c21full);
}

TEST(InitialState, TinyZeroThreeAsBeforeIssue25) {
  // ZeRO-3 at d = 1: the parameters stored as the rank's shard, gathered for each use; the
  // same initial values and losses, the norms' last bits summed in another order.
  const OneThread one;
  const Observed o = observe(make_plan(1, 1, 1, 1, ScheduleKind::kGpipe, 3, 2));
  EXPECT_EQ(o.initial, kInitialParams);
  EXPECT_EQ(o.losses, (std::vector<double>{kFirstLoss, kSecondLoss}));
  EXPECT_EQ(o.grad_norms, (std::vector<double>{0x1.5055d324de48ap+2, 0x1.3335cb5fd8699p+1}));
  EXPECT_EQ(o.after_first_step, 0xd4605f8cdf4a9fa8ull);
}

}  // namespace
}  // namespace strata
