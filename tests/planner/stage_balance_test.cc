// balanced_splits (planner/stage_balance.h): the legal uneven splits ordered by the busiest
// rank they would give, worked by hand on stage times whose layer time and extras are exact.
#include "planner/stage_balance.h"

#include <algorithm>

#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "cost_model/specs/units.h"
#include "planner/planner.h"
#include "tests/cost_model/bundled_configs.h"

namespace strata {
namespace {

ModelSpec with_layers(std::int64_t layers) {
  ModelSpec m = testing::bundled_model("tiny");
  m.layers = layers;
  return m;
}

std::vector<std::pair<std::int64_t, std::int64_t>> first_last(const std::vector<Plan>& plans) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const Plan& p : plans) out.emplace_back(p.first_stage_layers, p.last_stage_layers);
  return out;
}

TEST(BalancedSplits, RelieveTheLastStageOfFour) {
  // 16 layers on p = 4 (4 a stage): the middle ranks' 4.0 s give 1 s a layer; the first rank
  // has no extra, the last 2 s (its head). The least busiest rank any split reaches is 5 s
  // (18 s of work; with all ranks <= 4.5 s the last could hold 2 layers, the first and the
  // middle 4 each: 14 < 16). Splits at 5 s, in the order they are tried (first, then last,
  // ascending): 3,3 (ranks 3, 5, 5, 5), 4,2 (4, 5, 5, 4), 5,1 (5, 5, 5, 3), 5,3 (5, 4, 4, 5).
  Plan even;
  even.pp = 4;
  const std::vector<Plan> splits = balanced_splits(with_layers(16), even, {4.0, 4.0, 4.0, 6.0}, 3);
  EXPECT_EQ(first_last(splits),
            (std::vector<std::pair<std::int64_t, std::int64_t>>{{3, 3}, {4, 2}, {5, 1}}));
  for (const Plan& p : splits) {
    EXPECT_EQ(p.pp, 4);
    EXPECT_EQ(p.virtual_stages, 1);
  }
}

TEST(BalancedSplits, InterleavedOnTwoRanks) {
  // 8 layers on p = 2, v = 2 (four virtual stages of 2): with p = 2 the layer time is the
  // first rank's, 4.0 s / 4 layers; the last rank's extra is 6.0 - 4.0 = 2 s. A split
  // first f, last l, shared s (f + l + 2 s = 8) gives ranks f + s and l + s + 2: 5 s at
  // best (10 s of work on two ranks), reached by 3,1 (s = 2) and 4,2 (s = 1), in that order.
  Plan even;
  even.pp = 2;
  even.virtual_stages = 2;
  even.schedule = ScheduleKind::kInterleaved;
  EXPECT_EQ(first_last(balanced_splits(with_layers(8), even, {4.0, 6.0}, 2)),
            (std::vector<std::pair<std::int64_t, std::int64_t>>{{3, 1}, {4, 2}}));
}

TEST(BalancedSplits, NoneWithoutAnEvenPipeline) {
  const ModelSpec model = with_layers(16);
  Plan single;
  EXPECT_TRUE(balanced_splits(model, single, {1.0}, 3).empty());
  Plan uneven;
  uneven.pp = 4;
  uneven.last_stage_layers = 1;
  EXPECT_TRUE(balanced_splits(model, uneven, {4.0, 4.0, 4.0, 6.0}, 3).empty());
  Plan even;
  even.pp = 4;
  EXPECT_TRUE(balanced_splits(model, even, {4.0, 6.0}, 3).empty());  // not one time a rank
  EXPECT_TRUE(balanced_splits(model, even, {0.0, 0.0, 0.0, 0.0}, 3).empty());
}

// The planner proposes a split where it is faster: GPT-2 1.5B on one node of 8 A100s cut to
// 8 GiB each, where pipelines of 2 rank among the best; an even pipeline's last stage also
// runs the 50,257-row output layer. Every uneven plan it keeps beats its even twin, as
// predict() prices both.
TEST(BalancedSplits, ThePlannerProposesThemWhereTheyAreFaster) {
  const ModelSpec model = testing::bundled_model("gpt2-1.5b");
  ClusterSpec cluster = with_shape(testing::bundled_cluster("dgx-a100"), ClusterShape{1, 8});
  cluster.device.memory_bytes = 8 * units::kGiB;
  const TrainSpec train = testing::bundled_train("gpt2");
  PlannerOptions options;
  options.top_k = 5;
  const PlanSearchResult result = search_plans(model, cluster, train, options);
  const auto uneven = std::count_if(result.top.begin(), result.top.end(),
                                    [](const ScoredPlan& s) { return s.plan.uneven_stages(); });
  EXPECT_GE(uneven, 1);
  for (const ScoredPlan& s : result.top) {
    if (!s.plan.uneven_stages()) continue;
    SCOPED_TRACE(s.plan.label());
    Plan even = s.plan;
    even.first_stage_layers = 0;
    even.last_stage_layers = 0;
    EXPECT_GT(s.prediction.tokens_per_s, predict(model, cluster, train, even).tokens_per_s);
    EXPECT_DOUBLE_EQ(s.prediction.tokens_per_s, predict(model, cluster, train, s.plan).tokens_per_s);
  }
}

}  // namespace
}  // namespace strata
