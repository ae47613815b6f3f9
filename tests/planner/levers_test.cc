// The levers of a plan (planner/levers.h): each priced variant is predict()'s own figure, the
// best is named, and each lever appears where it applies. The pipeline case is issue 40's:
// GPT-2 1.5B on one node of 8 H100s in a pipeline of 8, whose last stage carries the 50,257-
// row output layer beside its 6 layers.
#include "planner/levers.h"

#include <gtest/gtest.h>

#include "planner/planner.h"
#include "tests/cost_model/bundled_configs.h"

namespace strata {
namespace {

using testing::bundled_cluster;
using testing::bundled_model;
using testing::bundled_train;

struct PipelineCase {
  ModelSpec model = bundled_model("gpt2-1.5b");
  ClusterSpec cluster = with_shape(bundled_cluster("dgx-h100"), ClusterShape{1, 8});
  TrainSpec train = bundled_train("gpt2");
  Plan plan;
  PipelineCase() {
    plan.pp = 8;
    plan.micro_batch = 4;
  }
};

const Lever* named(const std::vector<Lever>& levers, const std::string& name) {
  for (const Lever& l : levers) {
    if (l.name == name) return &l;
  }
  return nullptr;
}

TEST(Levers, AnUnevenSplitRelievesTheStageWithTheOutputLayer) {
  const PipelineCase c;
  const Prediction now = predict(c.model, c.cluster, c.train, c.plan);
  ASSERT_TRUE(now.pipeline_idle.has_value());
  // The last stage is the busiest, and most of the bubble is waiting on it.
  EXPECT_EQ(now.pipeline_idle->busiest_rank, 7);
  EXPECT_GT(now.pipeline_idle->imbalance_s, 4 * now.pipeline_idle->fill_drain_s);
  EXPECT_NEAR(now.pipeline_idle->imbalance_s + now.pipeline_idle->fill_drain_s,
              now.parts.bubble_s, 1e-12);
  const std::vector<Lever> levers = plan_levers(c.model, c.cluster, c.train, c.plan, nullptr, {});
  ASSERT_FALSE(levers.empty());
  EXPECT_EQ(levers.front().name, "uneven split");
  EXPECT_EQ(levers.front().plan.pp, 8);
  EXPECT_LT(levers.front().plan.last_stage_layers, 6);
  // Its figure is predict()'s for that plan, and a real gain.
  EXPECT_DOUBLE_EQ(levers.front().tokens_per_s,
                   predict(c.model, c.cluster, c.train, levers.front().plan).tokens_per_s);
  EXPECT_GT(levers.front().tokens_per_s, 1.1 * now.tokens_per_s);
  // Halving b = 4 doubles m = 128: a smaller fill and drain, a far smaller gain.
  const Lever* micro = named(levers, "micro-batches");
  ASSERT_NE(micro, nullptr);
  EXPECT_EQ(micro->plan.micro_batch, 2);
  EXPECT_LT(micro->tokens_per_s, levers.front().tokens_per_s);
  const std::string line = lever_line(levers, now.tokens_per_s);
  EXPECT_EQ(line.rfind("lever that would gain most: uneven split (first stage ", 0), 0u) << line;
}

TEST(Levers, RecomputeAndOffloadWhereThePlanHasThem) {
  PipelineCase c;
  c.plan.pp = 1;
  c.plan.dp = 8;
  c.plan.micro_batch = 1;
  c.plan.zero_stage = 2;
  c.plan.recompute = Recompute::kFull;
  c.plan.offload.optimizer = OffloadTier::kCpu;
  const Prediction now = predict(c.model, c.cluster, c.train, c.plan);
  const std::vector<Lever> levers = plan_levers(c.model, c.cluster, c.train, c.plan, nullptr, {});
  const Lever* recompute = named(levers, "recompute");
  const Lever* offload = named(levers, "offload");
  ASSERT_NE(recompute, nullptr);
  ASSERT_NE(offload, nullptr);
  EXPECT_LT(recompute->plan.recompute, Recompute::kFull);
  EXPECT_GT(recompute->tokens_per_s, now.tokens_per_s);  // less recomputed: less compute
  EXPECT_EQ(offload->plan.offload, OffloadPlan{});
  EXPECT_GT(offload->tokens_per_s, now.tokens_per_s);    // no optimizer round trip over PCIe
  EXPECT_EQ(named(levers, "uneven split"), nullptr);     // no pipeline to split
}

TEST(Levers, NoneThatGainsIsSaidSo) {
  EXPECT_EQ(lever_line({}, 100.0).rfind("lever: none of", 0), 0u);
  Lever slower;
  slower.name = "recompute";
  slower.tokens_per_s = 90;
  EXPECT_EQ(lever_line({slower}, 100.0).rfind("lever: none of", 0), 0u);
}

}  // namespace
}  // namespace strata
