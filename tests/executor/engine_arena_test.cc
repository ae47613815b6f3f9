// Buffers reused across steps (issue 19): after the first step a training step makes no
// system allocation (the allocator's arena serves every request from its free lists), and
// reuse changes neither the numbers nor the accounting. The reference is the same run with
// reuse off (every block from the system allocator and back, as before issue 19), so the
// expected values are the pre-arena run's own: losses, gradient norms and every tag's peak
// bytes per step, to the bit and to the byte.
//
// The arena run poisons the memory it hands out uninitialised (0xFF bytes: NaN as float).
// A caller that asked for memory without zero-fill and reads it before writing it (a
// gradient accumulated with += into an uninitialised buffer, say) then turns the loss into
// NaN, or at least moves it, and the bit-for-bit comparison fails. The reference run's
// fresh blocks are mostly zero pages, so it reads such a bug as zeros.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "executor/data/corpus.h"
#include "executor/run/rank_training.h"
#include "tests/executor/engine_mpi_environment.h"
#include "tests/executor/engine_test_support.h"

namespace strata {
namespace {

using testing_support::make_plan;

struct StepAccounting {
  double loss = 0, grad_norm = 0;
  std::int64_t device_peak = 0, host_peak = 0;
  std::vector<std::pair<std::string, std::int64_t>> tag_peaks;  // (tier/tag, peak) this step
  HostArenaStats arena;  // after the step
};

std::vector<StepAccounting> run(const Plan& plan, const HostArenaOptions& arena, int steps) {
  const ModelSpec model = testing_support::tiny_model();
  const TrainSpec train = testing_support::tiny_train();
  plan.check_against_model(model, train, "arena test plan");
  const auto corpus = data::generated_corpus(train.seed, 1 << 16);
  auto world = MpiCommunicator::duplicate(MPI_COMM_SELF);
  engine::OffloadOptions offload;
  offload.adam_tile_floats = 4096;  // several tiles of the streamed CPU AdamW per unit
  engine::RankTraining rank(model, train, plan, *world, TierBudgets{},
                            data::TokenView::of_bytes(corpus), offload,
                            engine::cpu_backend_maker(), {}, arena);
  std::vector<StepAccounting> out;
  for (int s = 0; s < steps; ++s) {
    rank.allocator().reset_peaks();  // each step's own peak window
    const auto r = rank.engine().step(s);
    StepAccounting a;
    a.loss = r.loss;
    a.grad_norm = r.grad_norm;
    a.device_peak = rank.allocator().usage(MemoryTier::kDevice).peak_bytes;
    a.host_peak = rank.allocator().usage(MemoryTier::kHost).peak_bytes;
    for (const TagUsage& t : rank.allocator().tags()) {
      a.tag_peaks.emplace_back(std::string(to_string(t.tier)) + "/" + t.tag, t.peak_bytes);
    }
    a.arena = rank.allocator().arena_stats();
    out.push_back(a);
  }
  return out;
}

void expect_steady_and_unchanged(const Plan& plan) {
  constexpr int kSteps = 4;
  const auto before = run(plan, HostArenaOptions{/*reuse=*/false, /*poison=*/false}, kSteps);
  const auto after = run(plan, HostArenaOptions{/*reuse=*/true, /*poison=*/true}, kSteps);
  const std::string label = plan.label();
  for (int s = 0; s < kSteps; ++s) {
    const auto& b = before[static_cast<std::size_t>(s)];
    const auto& a = after[static_cast<std::size_t>(s)];
    EXPECT_EQ(a.loss, b.loss) << label << " step " << s;  // bit for bit: no value read dirty
    EXPECT_EQ(a.grad_norm, b.grad_norm) << label << " step " << s;
    EXPECT_EQ(a.device_peak, b.device_peak) << label << " step " << s;
    EXPECT_EQ(a.host_peak, b.host_peak) << label << " step " << s;
    EXPECT_EQ(a.tag_peaks, b.tag_peaks) << label << " step " << s;
    // Without reuse every block comes from the system, and the run holds none in reserve.
    EXPECT_EQ(b.arena.reuses, 0) << label;
    EXPECT_EQ(b.arena.free_bytes, 0) << label;
  }
  // Reuse: the first step (and setup) allocated what the run needs; every later step is
  // served from the free lists alone, so the count of system allocations stays where the
  // warm-up step left it, while reuses grow by the same count every step (a step asks for
  // the same buffers every time).
  const HostArenaStats warm = after[0].arena;
  EXPECT_GT(warm.system_allocations, 0) << label;
  const std::int64_t per_step = after[1].arena.reuses - warm.reuses;
  EXPECT_GT(per_step, 0) << label;
  for (int s = 1; s < kSteps; ++s) {
    const HostArenaStats& now = after[static_cast<std::size_t>(s)].arena;
    EXPECT_EQ(now.system_allocations, warm.system_allocations) << label << " step " << s;
    EXPECT_EQ(now.held_bytes, warm.held_bytes) << label << " step " << s;
    EXPECT_EQ(now.reuses - after[static_cast<std::size_t>(s - 1)].arena.reuses, per_step)
        << label << " step " << s;
  }
  // The reference made a system allocation for every request, the same count each step.
  EXPECT_EQ(before[2].arena.system_allocations - before[1].arena.system_allocations, per_step)
      << label;
}

TEST(EngineArena, OneFOneBNoSteadyStateAllocations) {
  expect_steady_and_unchanged(make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 0, 2));
}

TEST(EngineArena, ZeroThreeWithRecomputeNoSteadyStateAllocations) {
  // ZeRO-3 at d = 1 still gathers into and frees zero3_gather buffers (allocated without
  // zero-fill) and frees full gradients after the reduction; selective recomputation frees
  // and rebuilds tensors inside the step.
  Plan plan = make_plan(1, 1, 1, 1, ScheduleKind::kGpipe, 3, 2);
  plan.recompute = Recompute::kSelective;
  expect_steady_and_unchanged(plan);
}

TEST(EngineArena, OffloadedStateNoSteadyStateAllocations) {
  // ZeRO-3 with the optimizer, gradients and parameters in host memory: param_fetch,
  // grad_fetch and staging buffers (several without zero-fill) every step.
  Plan plan = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 3, 4);
  plan.offload.optimizer = OffloadTier::kCpu;
  plan.offload.gradients = OffloadTier::kCpu;
  plan.offload.params = OffloadTier::kCpu;
  expect_steady_and_unchanged(plan);
}

}  // namespace
}  // namespace strata
