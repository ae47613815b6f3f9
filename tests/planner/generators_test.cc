// The planner's generators: each dimension's values on cases worked by hand, the rule
// counts of parallel_degrees, and that every generated plan passes Plan::check.
#include "planner/generators.h"

#include <gtest/gtest.h>

#include "cost_model/specs/errors.h"
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
  const auto degrees = parallel_degrees(small_model(), small_cluster(), small_train(), 4, DegreeRules{}, dropped);
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
  const auto degrees = parallel_degrees(model, small_cluster(), train, 4, DegreeRules{}, dropped);
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
  const auto within = parallel_degrees(model, small_cluster(80, 2), small_train(), 8, DegreeRules{}, dropped);
  for (const auto& d : within) EXPECT_LE(d.tp, 4);
  // t = 8 appears once (p = d = 1), so one triple is dropped for it.
  EXPECT_EQ(dropped[drop_reason::kTpWithinNode], 1);
  std::map<std::string, std::int64_t> none;
  const auto across = parallel_degrees(model, small_cluster(80, 2), small_train(), 8, DegreeRules{true, nullptr}, none);
  EXPECT_EQ(across.size(), within.size() + 1);
}

// The example: 6 heads on 3 nodes of 4. t = 3 divides the heads and fits a node's 4,
// but world ranks 3,4,5 are on two nodes, which `strata run --nodes 3 --ranks-per-node 4`
// refuses; t = 6 exceeds the node. Of the 12 GPUs' factorisations with t | 6 (t in 1, 2,
// 3, 6: 6 + 4 + 3 + 2 = 15 triples; 12 layers and batch 24 drop none), t = 3's three and
// t = 6's two break the placement rule.
TEST(ParallelDegrees, TensorParallelGroupsDivideTheNode) {
  ModelSpec model = small_model();
  model.heads = 6;
  model.hidden = 96;
  model.ffn_hidden = 384;
  model.layers = 12;
  std::map<std::string, std::int64_t> dropped;
  const auto degrees =
      parallel_degrees(model, small_cluster(80, 3), small_train(24), 12, DegreeRules{}, dropped);
  for (const auto& d : degrees) EXPECT_TRUE(d.tp == 1 || d.tp == 2) << d.tp;
  EXPECT_EQ(dropped[drop_reason::kTpWithinNode], 5);
  EXPECT_EQ(degrees.size(), 10u);
  // Inside one node every group is inside it: t = 3 on 3 of the 4 GPUs is legal.
  std::map<std::string, std::int64_t> one_node;
  const auto three = parallel_degrees(model, small_cluster(80, 3), small_train(24), 3,
                                      DegreeRules{}, one_node);
  EXPECT_EQ(one_node.count(drop_reason::kTpWithinNode), 0u);
  EXPECT_TRUE(std::any_of(three.begin(), three.end(), [](const auto& d) { return d.tp == 3; }));
}

// An executor's limits drop what it does not train, with its reason: the small model's head
// size 16 is not one the CUDA attention kernel runs (backend_facts.h: 64 or 128), so no
// factorisation survives on a CUDA cluster; without an executor (a published framework's
// plans) all do.
TEST(ParallelDegrees, TheExecutorsLimitsDropWhatItDoesNotTrain) {
  ClusterSpec cluster = small_cluster();
  cluster.backend = Backend::kCuda;
  std::map<std::string, std::int64_t> dropped;
  const DegreeRules cuda{false, &backend_facts(Backend::kCuda)};
  EXPECT_TRUE(parallel_degrees(small_model(), cluster, small_train(), 4, cuda, dropped).empty());
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_NE(dropped.begin()->first.find("CUDA backend: hidden / heads = 64 / 4 = 16"),
            std::string::npos) << dropped.begin()->first;
  std::map<std::string, std::int64_t> none;
  EXPECT_EQ(parallel_degrees(small_model(), cluster, small_train(), 4, DegreeRules{}, none).size(), 6u);
  // The planner's rules: strata's executor unless a framework's conventions are given.
  EXPECT_EQ(degree_rules(PlannerOptions{}, cluster).executor, &backend_facts(Backend::kCuda));
  PlannerOptions published;
  published.cost.conventions = megatron_lm_2021_conventions();
  EXPECT_EQ(degree_rules(published, cluster).executor, nullptr);
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
    for_each_base_plan(small_model(), cluster, small_train(), cluster.total_gpus(), degree_rules(PlannerOptions{}, cluster), 8, 16,
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
