// Sizing (planner/sizing.h) on the small case, whose counts are worked by hand, and the
// planner on a cluster without an NVMe tier.
#include "planner/sizing.h"

#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "cost_model/specs/errors.h"
#include "planner/generators.h"
#include "tests/planner/small_case.h"

namespace strata {
namespace {

using testing::small_cluster;
using testing::small_model;
using testing::small_train;

ClusterSpec without_nvme(ClusterSpec cluster) {
  cluster.nvme = NvmeSpec{};
  return cluster;
}

TEST(NoNvmeTier, ThePlannerProposesNoNvmePlacement) {
  // Offload placements with tiers {none, cpu} only (generators.h's depth rule):
  //   ZeRO 0, 1: optimizer none|cpu                                       2 each
  //   ZeRO 2:    (none,none), (cpu,none), (cpu,cpu)                        3
  //   ZeRO 3:    (none,none,none), (cpu,none,none), (cpu,cpu,none),
  //              (cpu,cpu,cpu)                                             4
  // 11 instead of 22, so every base plan has half the memory variants and the small case's
  // 3564 candidates (planner_test.cc) become 1782.
  EXPECT_EQ(offload_options(0, false).size() + offload_options(1, false).size() +
                offload_options(2, false).size() + offload_options(3, false).size(),
            11u);
  PlannerOptions options;
  options.exhaustive = true;
  options.top_k = 1000;
  const PlanSearchResult result =
      search_plans(small_model(), without_nvme(small_cluster()), small_train(), options);
  EXPECT_EQ(result.candidates, 1782);
  for (const ScoredPlan& s : result.top) {
    for (OffloadTier tier : {s.plan.offload.optimizer, s.plan.offload.gradients,
                             s.plan.offload.params}) {
      EXPECT_NE(tier, OffloadTier::kNvme) << s.plan.label();
    }
  }
}

TEST(NoNvmeTier, APlanAskingForNvmeIsRefused) {
  Plan plan;
  plan.dp = 4;
  plan.zero_stage = 1;
  plan.offload.optimizer = OffloadTier::kNvme;
  EXPECT_NO_THROW(plan.check(small_model(), small_cluster(), small_train()));
  try {
    plan.check(small_model(), without_nvme(small_cluster()), small_train());
    ADD_FAILURE() << "an NVMe plan on a cluster without NVMe was accepted";
  } catch (const InfeasiblePlan& e) {
    EXPECT_NE(std::string(e.what()).find("offload.optimizer = \"nvme\""), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("no NVMe tier"), std::string::npos) << e.what();
  }
}

// The small case on 4 nodes of 4 GPUs: counts 4, 8, 12, 16. 12 = 2^2 x 3 has no legal
// factorisation: t divides 4 heads, p divides 4 layers, d divides the batch of 8, so the
// factor 3 has nowhere to go.
ClusterSpec four_nodes() { return small_cluster(80.0, 4); }

// The small case's shape (4 layers, 4 heads: the same legal counts) made wide enough that
// compute, not communication, sets the step time, so that more GPUs train faster.
ModelSpec wide_model() {
  ModelSpec model = small_model();
  model.hidden = 2048;
  model.ffn_hidden = 8192;
  model.seq_len = 2048;
  return model;
}

double best_rate(std::int64_t gpus) {
  PlannerOptions options;
  options.gpus = gpus;
  return search_plans(wide_model(), four_nodes(), small_train(), options)
      .top.front()
      .prediction.tokens_per_s;
}

TEST(Sizing, IllegalCountsAndTheirNearestLegalOnes) {
  const auto drops = rule_drops_if_illegal(small_model(), four_nodes(), small_train(), 12, DegreeRules{});
  ASSERT_FALSE(drops.empty());
  // Every (t, p, d) with t p d = 12 is dropped, each once: the ordered triples number the sum
  // over t | 12 of the divisor count of 12 / t = 6 + 4 + 3 + 2 + 2 + 1 = 18.
  std::int64_t triples = 0;
  for (const auto& [reason, count] : drops) triples += count;
  EXPECT_EQ(triples, 18);
  EXPECT_EQ(nearest_legal_counts(small_model(), four_nodes(), small_train(), 12, 16, DegreeRules{}),
            (std::pair<std::int64_t, std::int64_t>{8, 16}));
  EXPECT_TRUE(rule_drops_if_illegal(small_model(), four_nodes(), small_train(), 8, DegreeRules{}).empty());
}

TEST(Sizing, FindsTheSmallestCountThatMeetsTheDeadline) {
  // A deadline halfway between what 4 and 8 GPUs' best plans can do: 4 GPUs miss it, 8 make
  // it (more GPUs are faster on this model: checked first, as the test's premise).
  const double r4 = best_rate(4), r8 = best_rate(8), r16 = best_rate(16);
  ASSERT_LT(r4, r8);
  ASSERT_LE(r8, r16);
  SizingRequest request;
  request.tokens = 1e9;
  request.deadline_s = request.tokens / ((r4 + r8) / 2);
  const SizingResult result =
      size_for_deadline(wide_model(), four_nodes(), small_train(), PlannerOptions{}, request);
  EXPECT_EQ(result.max_gpus, 16);
  ASSERT_TRUE(result.smallest.has_value());
  const SizingTry& chosen = result.tries[*result.smallest];
  EXPECT_EQ(chosen.gpus, 8);
  EXPECT_DOUBLE_EQ(chosen.best().prediction.tokens_per_s, r8);  // the planner's own best
  EXPECT_DOUBLE_EQ(chosen.gpu_hours(request.tokens), 8 * request.tokens / r8 / 3600);
  EXPECT_EQ(result.tries.front().gpus, 16) << "the largest count is tried first";
  bool tried_4 = false;
  for (const SizingTry& t : result.tries) {
    if (t.legal) {
      EXPECT_EQ(t.meets, t.train_seconds(request.tokens) <= request.deadline_s) << t.gpus;
    } else {
      EXPECT_FALSE(t.meets);
      EXPECT_EQ(t.gpus, 12);
    }
    if (t.gpus == 4) {
      tried_4 = true;
      EXPECT_FALSE(t.meets);
    }
  }
  // 8 is only "smallest" once 4, the one legal count below it, is known to miss.
  EXPECT_TRUE(tried_4);
}

TEST(Sizing, NoCountMeetsAnImpossibleDeadline) {
  SizingRequest request;
  request.tokens = 1e12;
  request.deadline_s = 1;  // 1e12 tokens/s
  const SizingResult result =
      size_for_deadline(small_model(), four_nodes(), small_train(), PlannerOptions{}, request);
  EXPECT_FALSE(result.smallest.has_value());
  ASSERT_EQ(result.tries.size(), 1u) << "the largest count missing ends the search";
  EXPECT_FALSE(result.tries.front().meets);
}

// The largest count missing, how many GPUs would do: the small case's 16 GPUs at their best
// plan's rate per GPU, scaled to the rate needed and rounded up to whole nodes of 4 (the CPU
// backend has no peak floor).
TEST(Sizing, SaysHowManyGpusAnImpossibleDeadlineNeeds) {
  SizingRequest request;
  request.tokens = 1e12;
  request.deadline_s = 1;
  const SizingResult result =
      size_for_deadline(small_model(), four_nodes(), small_train(), PlannerOptions{}, request);
  ASSERT_EQ(result.tries.size(), 1u);
  ASSERT_TRUE(result.needed_from.has_value());
  EXPECT_EQ(*result.needed_from, 0u);
  const double per_gpu = result.tries[0].best().prediction.tokens_per_s / 16;
  const auto nodes = static_cast<std::int64_t>(std::ceil(1e12 / per_gpu / 4));
  EXPECT_EQ(result.needed_gpus, 4 * nodes);
  EXPECT_GT(result.needed_gpus, 16);
}

// On a CUDA cluster the peak FLOP/s set a floor, and no count below it is searched: above the
// cluster the sizing searches nothing and says the floor's whole nodes; within it, whatever
// the deadline, each count is tried once and none below the floor. (The small case priced as
// a framework's plans, conventions given: strata's CUDA kernels would not run its head size.)
TEST(Sizing, NoCountBelowTheFloorNorAnyCountTwice) {
  ClusterSpec cuda = four_nodes();
  cuda.backend = Backend::kCuda;
  PlannerOptions options;
  options.cost.conventions = executor_conventions(Backend::kCuda);
  SizingRequest request;
  request.tokens = 1e15;
  request.deadline_s = 1;
  const SizingResult above =
      size_for_deadline(wide_model(), cuda, small_train(), options, request);
  ASSERT_GT(above.peak_floor_gpus, 16);
  EXPECT_TRUE(above.tries.empty());
  EXPECT_FALSE(above.needed_from.has_value());
  EXPECT_EQ(above.needed_gpus, (above.peak_floor_gpus + 3) / 4 * 4);
  const double r16 = size_for_deadline(wide_model(), cuda, small_train(), options,
                                       SizingRequest{1.0, 1e9, 0})
                         .tries.front().best().prediction.tokens_per_s;
  for (const double fraction : {0.05, 0.3, 0.5, 0.7, 0.9, 1.0}) {
    request.tokens = 1e9;
    request.deadline_s = request.tokens / (fraction * r16);
    const SizingResult r = size_for_deadline(wide_model(), cuda, small_train(), options, request);
    std::set<std::int64_t> seen;
    for (const SizingTry& t : r.tries) {
      EXPECT_TRUE(seen.insert(t.gpus).second) << t.gpus << " tried twice at " << fraction;
      EXPECT_GE(t.gpus, r.peak_floor_gpus) << fraction;
    }
  }
}

TEST(Sizing, RejectsImpossibleRequests) {
  SizingRequest request;
  request.tokens = 0;
  request.deadline_s = 1;
  EXPECT_THROW(size_for_deadline(small_model(), four_nodes(), small_train(), {}, request),
               ConfigError);
  request.tokens = 1;
  request.max_gpus = 32;  // the cluster has 16
  EXPECT_THROW(size_for_deadline(small_model(), four_nodes(), small_train(), {}, request),
               ConfigError);
}

}  // namespace
}  // namespace strata
