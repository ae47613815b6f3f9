// The planner's generators: each dimension's values on cases worked by hand, the rule
// counts of parallel_degrees, and that every generated plan passes Plan::check.
#include "planner/generators.h"

#include <gtest/gtest.h>

#include "cost_model/errors.h"
#include "planner/planner.h"
#include "tests/planner/small_case.h"

namespace strata {
namespace {

using testing::small_cluster;
using testing::small_model;
using testing::small_train;

TEST(Divisors, AscendingAndComplete) {
  EXPECT_EQ(divisors(1), (std::vector<std::int64_t>{1}));
  EXPECT_EQ(divisors(12), (std::vector<std::int64_t>{1, 2, 3, 4, 6, 12}));
  EXPECT_EQ(divisors(16), (std::vector<std::int64_t>{1, 2, 4, 8, 16}));
  // 3072 = 2^10 * 3: (10 + 1) * (1 + 1) = 22 divisors.
  EXPECT_EQ(divisors(3072).size(), 22u);
}

TEST(ParallelDegrees, AllFactorisationsOfFourGpus) {
  // 4 GPUs: (t, p, d) with t*p*d = 4 are (1,1,4) (1,2,2) (1,4,1) (2,1,2) (2,2,1) (4,1,1);
  // heads 4, ffn 256, layers 4, batch 8 admit all six.
  std::map<std::string, std::int64_t> dropped;
  const auto degrees = parallel_degrees(small_model(), small_cluster(), small_train(), 4, false, dropped);
  const std::vector<ParallelDegrees> expected = {{1, 1, 4}, {1, 2, 2}, {1, 4, 1},
                                                 {2, 1, 2}, {2, 2, 1}, {4, 1, 1}};
  EXPECT_EQ(degrees, expected);
  EXPECT_TRUE(dropped.empty());
}

TEST(ParallelDegrees, CountsEachBrokenRuleOnce) {
  ModelSpec model = small_model();
  model.heads = 2;   // t = 4 no longer divides heads: drops (4,1,1)
  model.hidden = 64;
  model.layers = 2;  // p = 4 no longer divides layers: drops (1,4,1)
  TrainSpec train = small_train(2);  // batch 2: d = 4 does not divide it: drops (1,1,4)
  std::map<std::string, std::int64_t> dropped;
  const auto degrees = parallel_degrees(model, small_cluster(), train, 4, false, dropped);
  const std::vector<ParallelDegrees> expected = {{1, 2, 2}, {2, 1, 2}, {2, 2, 1}};
  EXPECT_EQ(degrees, expected);
  EXPECT_EQ(dropped[drop_reason::kTpDividesHeads], 1);
  EXPECT_EQ(dropped[drop_reason::kPpDividesLayers], 1);
  EXPECT_EQ(dropped[drop_reason::kDpDividesBatch], 1);
}

TEST(ParallelDegrees, TensorParallelStaysInsideANode) {
  // 8 GPUs on two nodes of 4: t = 8 would cross nodes. heads 8 so only that rule bites.
  ModelSpec model = small_model();
  model.heads = 8;
  std::map<std::string, std::int64_t> dropped;
  const auto within = parallel_degrees(model, small_cluster(80, 2), small_train(), 8, false, dropped);
  for (const auto& d : within) EXPECT_LE(d.tp, 4);
  // t = 8 appears once (p = d = 1), so one triple is dropped for it.
  EXPECT_EQ(dropped[drop_reason::kTpWithinNode], 1);
  std::map<std::string, std::int64_t> none;
  const auto across = parallel_degrees(model, small_cluster(80, 2), small_train(), 8, true, none);
  EXPECT_EQ(across.size(), within.size() + 1);
}

TEST(VirtualStages, DivideLayersByPTimesV) {
  ModelSpec model = small_model();
  model.layers = 24;
  EXPECT_EQ(virtual_stage_options(model, 1, 8), (std::vector<std::int64_t>{1}));
  // 24 / (2 v) integral for v = 1, 2, 3, 4, 6 (<= 8).
  EXPECT_EQ(virtual_stage_options(model, 2, 8), (std::vector<std::int64_t>{1, 2, 3, 4, 6}));
  EXPECT_EQ(virtual_stage_options(model, 2, 3), (std::vector<std::int64_t>{1, 2, 3}));
  // 24 / 24 = 1 layer per rank: no interleaving possible.
  EXPECT_EQ(virtual_stage_options(model, 24, 8), (std::vector<std::int64_t>{1}));
}

TEST(MicroBatches, DivideTheBatchOfOnePipeline) {
  // global batch 96, d = 2: 48 sequences per pipeline, divisors <= 16.
  EXPECT_EQ(micro_batch_options(small_train(96), 2, 16),
            (std::vector<std::int64_t>{1, 2, 3, 4, 6, 8, 12, 16}));
  EXPECT_EQ(micro_batch_options(small_train(8), 8, 16), (std::vector<std::int64_t>{1}));
}

TEST(Schedules, FollowPipelineRules) {
  using enum ScheduleKind;
  EXPECT_EQ(schedule_options(1, 1, 5), (std::vector<ScheduleKind>{kOneFOneB}));
  EXPECT_EQ(schedule_options(4, 1, 5), (std::vector<ScheduleKind>{kGpipe, kOneFOneB}));
  EXPECT_EQ(schedule_options(4, 2, 8), (std::vector<ScheduleKind>{kInterleaved}));
  EXPECT_TRUE(schedule_options(4, 2, 6).empty());  // interleaved needs m % p == 0
}

TEST(SequenceParallel, NeedsTensorParallelThatDividesTheSequence) {
  ModelSpec model = small_model();  // seq_len 32
  EXPECT_EQ(sequence_parallel_options(model, 1), (std::vector<bool>{false}));
  EXPECT_EQ(sequence_parallel_options(model, 4), (std::vector<bool>{false, true}));
  model.seq_len = 30;  // 30 % 4 != 0: the sequence cannot be split over 4 ranks
  EXPECT_EQ(sequence_parallel_options(model, 4), (std::vector<bool>{false}));
}

TEST(Offload, PlacementsPerZeroStage) {
  // Optimizer in {none, cpu, nvme}; gradients need ZeRO >= 2 and go no deeper than the
  // optimizer; parameters need ZeRO-3 and go no deeper than the gradients.
  // ZeRO 0/1: 3 placements. ZeRO 2: pairs (o, g) with g <= o: 3 + 2 + 1 = 6.
  // ZeRO 3: triples o >= g >= p over 3 tiers: C(3 + 2, 3) = 10.
  EXPECT_EQ(offload_options(0, true).size(), 3u);
  EXPECT_EQ(offload_options(1, true).size(), 3u);
  EXPECT_EQ(offload_options(2, true).size(), 6u);
  EXPECT_EQ(offload_options(3, true).size(), 10u);
  for (int zero = 0; zero <= 3; ++zero) {
    EXPECT_EQ(offload_options(zero, true).front(), OffloadPlan{}) << "no offload comes first";
    for (const OffloadPlan& o : offload_options(zero, true)) {
      EXPECT_GE(o.optimizer, o.gradients);
      EXPECT_GE(o.gradients, o.params);
    }
  }
}

TEST(Generators, EveryPlanPassesPlanCheck) {
  // All base plans x memory variants of the 4-GPU case, and of 8 GPUs on two nodes.
  for (std::int64_t nodes : {1, 2}) {
    const ClusterSpec cluster = small_cluster(80, nodes);
    std::map<std::string, std::int64_t> dropped;
    std::int64_t plans = 0;
    for_each_base_plan(small_model(), cluster, small_train(), cluster.total_gpus(), false, 8, 16,
                       dropped, [&](const Plan& base) {
      for (const OffloadPlan& offload : offload_options(base.zero_stage, cluster.has_nvme())) {
        for (Recompute recompute : recompute_options()) {
          Plan plan = base;
          plan.offload = offload;
          plan.recompute = recompute;
          EXPECT_NO_THROW(plan.check(small_model(), cluster, small_train())) << plan.label();
          ++plans;
        }
      }
    });
    EXPECT_GT(plans, 0);
  }
}

}  // namespace
}  // namespace strata
