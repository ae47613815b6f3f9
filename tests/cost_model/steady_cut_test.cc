// The memory walk of a steady phase cut short (cost_model/program/steady_cut.h) against the walk of
// every micro-batch: the same estimate to the byte and the same peak moment, on every rank
// of a matrix of plans (CPU and CUDA widths; 1F1B and interleaved; p 2..8, v 1..4; TP, SP,
// DP, ZeRO 0-3, offload, recomputation), each with micro-batch counts that leave several
// periods to cut.
#include "cost_model/program/steady_cut.h"

#include <gtest/gtest.h>

#include <string>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/errors.h"
#include "cost_model/memory/memory_model.h"
#include "tests/cost_model/program_test_util.h"
#include "tests/cost_model/bundled_configs.h"

namespace strata {
namespace {

using testing::bundled_cluster;

TEST(SteadyCut, KeepsTheWarmUpTwoPeriodsAndTheEndAndCutsWholePeriods) {
  // 1F1B, p 4, rank 1: warm-up 2, steady m - 2 pairs of period 1; kept 2 + 4 = 6 in front,
  // 5 behind, so m = 100 cuts (98 - 11) periods: m' = 13, shifted from pass 2 + 2 * 6 = 14.
  const SteadyCut a = steady_cut(ScheduleKind::kOneFOneB, 4, 1, 100, 1);
  EXPECT_EQ(a.micro_batches, 13);
  EXPECT_EQ(a.shift, 87);
  EXPECT_EQ(a.from_pass, 14);
  // Interleaved p 4 v 2, rank 0: warm-up 2 * 3 + 4 = 10, steady 2 m - 10 pairs of period 8
  // (4 micro-batches); kept 20 in front, 12 behind: m = 64 has 118 steady pairs, (118 - 32)
  // / 8 = 10 periods cut, m' = 64 - 40 = 24.
  const SteadyCut b = steady_cut(ScheduleKind::kInterleaved, 4, 2, 64, 0);
  EXPECT_EQ(b.micro_batches, 24);
  EXPECT_EQ(b.shift, 40);
  EXPECT_EQ(b.from_pass, 10 + 40);
  // Nothing to cut: GPipe, or a steady phase shorter than what is kept plus a period.
  EXPECT_EQ(steady_cut(ScheduleKind::kGpipe, 4, 1, 100, 1).micro_batches, 100);
  EXPECT_EQ(steady_cut(ScheduleKind::kOneFOneB, 4, 1, 13, 1).from_pass, -1);
  EXPECT_EQ(steady_cut(ScheduleKind::kInterleaved, 4, 2, 20, 0).micro_batches, 20);
}

TEST(SteadyCut, CutWalkIsTheFullWalkOnEveryRank) {
  MemoryModelOptions full;
  full.walk_cuts_steady_phase = false;
  int compared = 0, cut = 0;
  for (const char* cluster_name : {"local-cpu", "h100-x1"}) {
    const ClusterSpec cluster = bundled_cluster(cluster_name);
    for (std::int64_t p : {2, 3, 4, 8}) {
      for (std::int64_t v : {1, 2, 4}) {
        const ModelSpec model = testing::small_gpt(p * v);
        for (std::int64_t periods : {3, 7}) {
          // m: enough periods to cut, and one that is not a whole number of them (1F1B).
          const std::int64_t m = v > 1 ? p * (2 * v + periods) : 3 * p + 3 * periods + 1;
          for (int variant = 0; variant < 6; ++variant) {
            Plan plan;
            plan.pp = p;
            plan.virtual_stages = v;
            plan.schedule = v > 1 ? ScheduleKind::kInterleaved : ScheduleKind::kOneFOneB;
            plan.tp = variant % 2 == 1 ? 2 : 1;
            plan.sequence_parallel = variant == 3;
            plan.dp = variant >= 2 ? 2 : 1;
            plan.zero_stage = variant == 2 ? 1 : variant == 3 ? 2 : variant >= 4 ? 3 : 0;
            plan.recompute = variant == 1 ? Recompute::kFull : variant == 3 ? Recompute::kSelective : Recompute::kNone;
            if (variant == 5) plan.offload = OffloadPlan{OffloadTier::kCpu, OffloadTier::kCpu, OffloadTier::kCpu};
            const TrainSpec train = testing::train_of(m * plan.dp * plan.micro_batch);
            MemoryEstimate a, b;
            try {
              a = estimate_memory(model, cluster, train, plan);
              b = estimate_memory(model, cluster, train, plan, full);
            } catch (const InfeasiblePlan& e) {
              ADD_FAILURE() << plan.label() << ": " << e.what();
              continue;
            }
            for (std::int64_t r = 0; r < p; ++r) {
              const StageMemory& x = a.stages[static_cast<std::size_t>(r)];
              const StageMemory& y = b.stages[static_cast<std::size_t>(r)];
              const std::string what = std::string(cluster_name) + " " + plan.label() + " m " +
                                       std::to_string(m) + " rank " + std::to_string(r);
              EXPECT_EQ(x.total.device, y.total.device) << what;
              EXPECT_EQ(x.activations.device, y.activations.device) << what;
              EXPECT_EQ(x.gradients.device, y.gradients.device) << what;
              EXPECT_EQ(x.step_gradient_bytes, y.step_gradient_bytes) << what;
              EXPECT_EQ(x.peak_moment, y.peak_moment) << what;
              ++compared;
              cut += steady_cut(plan.schedule, p, v, m, r).from_pass >= 0 ? 1 : 0;
            }
          }
        }
      }
    }
  }
  // 2 clusters x (2 + 3 + 4 + 8 ranks) x 3 v x 2 m x 6 variants; most ranks cut.
  EXPECT_EQ(compared, 2 * 17 * 3 * 2 * 6);
  EXPECT_GT(cut, compared / 2);
}

}  // namespace
}  // namespace strata
