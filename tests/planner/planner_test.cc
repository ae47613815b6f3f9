// The plan search: candidate counts worked by hand, pruning that never loses the best plan,
// ranking order, the infeasible report (top reason, closest plan), determinism, the ranked
// figures exactly predict()'s, skipped replays that change nothing, and the memory-fit
// arithmetic.
#include "planner/planner.h"

#include <limits>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/units.h"
#include "planner/generators.h"
#include "tests/planner/small_case.h"

namespace strata {
namespace {

using testing::small_cluster;
using testing::small_model;
using testing::small_train;

// Candidates of the 4-GPU small case. Memory variants per base plan: offload placements
// (3, 3, 6, 10 for ZeRO 0..3, see generators_test) x 3 recompute policies = 22 x 3 = 66 per
// (t, p, d, v, b, schedule), doubled by sequence parallelism when t > 1. Groups (batch 8):
//   t1 p1 d4: b in {1,2}, 1f1b                                   2 x 66  =  132
//   t1 p2 d2: v1: b in {1,2,4} x {gpipe,1f1b} = 6; v2: b in {1,2}
//             (m = 4/b must be a multiple of p = 2) = 2           8 x 66  =  528
//   t1 p4 d1: v1 only (4 layers / 4 ranks), b in {1,2,4,8} x 2   8 x 66  =  528
//   t2 p1 d2: b in {1,2,4}                                       3 x 132 =  396
//   t2 p2 d1: v1: 4 b x 2 schedules = 8; v2: b in {1,2,4} = 3    11 x 132 = 1452
//   t4 p1 d1: b in {1,2,4,8}                                     4 x 132 =  528
// total 3564.
constexpr std::int64_t kSmallCaseCandidates = 3564;

PlannerOptions exhaustive_options() {
  PlannerOptions options;
  options.exhaustive = true;
  options.top_k = 10;
  return options;
}

// Every generated plan of the small case, scored directly with predict().
std::vector<ScoredPlan> score_everything(const ClusterSpec& cluster) {
  std::vector<ScoredPlan> all;
  std::map<std::string, std::int64_t> dropped;
  for_each_base_plan(small_model(), cluster, small_train(), cluster.total_gpus(), degree_rules(PlannerOptions{}, cluster), 8, 16,
                     dropped, [&](const Plan& base) {
    for (const OffloadPlan& offload : offload_options(base.zero_stage, cluster.has_nvme())) {
      for (Recompute recompute : recompute_options()) {
        Plan plan = base;
        plan.offload = offload;
        plan.recompute = recompute;
        all.push_back({plan, predict(small_model(), cluster, small_train(), plan)});
      }
    }
  });
  return all;
}

TEST(PlanSearch, CandidateCountWorkedByHand) {
  const PlanSearchResult full =
      search_plans(small_model(), small_cluster(), small_train(), exhaustive_options());
  EXPECT_EQ(full.gpus, 4);
  EXPECT_EQ(full.candidates, kSmallCaseCandidates);
  EXPECT_EQ(full.scored, kSmallCaseCandidates);
  EXPECT_EQ(full.pruned, 0);
  EXPECT_TRUE(full.dropped.empty()) << "80 GiB holds every plan of a 4-layer, h=64 model";
  EXPECT_EQ(full.fitting, kSmallCaseCandidates);

  const PlanSearchResult pruned = search_plans(small_model(), small_cluster(), small_train());
  EXPECT_EQ(pruned.candidates, kSmallCaseCandidates);
  EXPECT_EQ(pruned.scored + pruned.pruned, kSmallCaseCandidates);
  // Everything fits without offload or recompute, so each base plan scores exactly one
  // variant (no offload, no recompute): 3564 / 66 = 54 (t, p, d, v, b, schedule, sp)
  // groups, each with 4 ZeRO stages = 216 base plans.
  EXPECT_EQ(pruned.scored, kSmallCaseCandidates / 66 * 4);
}

TEST(PlanSearch, PruningNeverLosesTheBestPlan) {
  // Tight device memory makes offload and recompute matter: ~the small model's ZeRO-0
  // state (16 bytes x ~0.2 M parameters = ~3.3 MB) plus activations.
  for (double device_gib : {80.0, 0.004, 0.003}) {
    const ClusterSpec cluster = small_cluster(device_gib);
    const PlanSearchResult full =
        search_plans(small_model(), cluster, small_train(), exhaustive_options());
    const PlanSearchResult pruned = search_plans(small_model(), cluster, small_train());
    ASSERT_EQ(full.top.empty(), pruned.top.empty()) << device_gib;
    if (full.top.empty()) continue;
    EXPECT_EQ(pruned.top.front().plan, full.top.front().plan) << device_gib;
    EXPECT_EQ(pruned.top.front().prediction.tokens_per_s,
              full.top.front().prediction.tokens_per_s);
  }
}

TEST(PlanSearch, RanksByThroughputAndKeepsTopK) {
  PlannerOptions options;
  options.top_k = 7;
  const PlanSearchResult result = search_plans(small_model(), small_cluster(), small_train(), options);
  ASSERT_EQ(result.top.size(), 7u);
  for (std::size_t i = 1; i < result.top.size(); ++i) {
    EXPECT_TRUE(ranks_before(result.top[i - 1], result.top[i])) << i;
    EXPECT_GE(result.top[i - 1].prediction.tokens_per_s, result.top[i].prediction.tokens_per_s);
  }
  // The best is the fastest of every generated plan, scored one by one here.
  double fastest = 0;
  for (const ScoredPlan& s : score_everything(small_cluster())) {
    fastest = std::max(fastest, s.prediction.tokens_per_s);
  }
  EXPECT_EQ(result.top.front().prediction.tokens_per_s, fastest);
}

TEST(PlanSearch, InfeasibleReportsReasonAndClosestPlan) {
  // 64 KiB of device memory: no plan of the small model fits (its embedding alone is
  // V h = 128 x 64 bf16 values = 16 KiB, the layers ~50 k parameters x 16 bytes ~ 800 KB).
  const ClusterSpec cluster = small_cluster(64.0 / (1024 * 1024));
  const PlanSearchResult result = search_plans(small_model(), cluster, small_train());
  EXPECT_TRUE(result.top.empty());
  EXPECT_EQ(result.fitting, 0);
  EXPECT_EQ(result.top_reason, drop_reason::kDeviceMemory);
  EXPECT_EQ(result.dropped.at(drop_reason::kDeviceMemory), result.scored);
  ASSERT_TRUE(result.closest.has_value());
  ASSERT_TRUE(result.closest_overshoot.has_value());
  EXPECT_FALSE(result.closest_overshoot->fits());

  // The closest plan has the least overshoot of all plans (the search prunes only plans
  // that are slower, never those that use less memory... so compare with every plan).
  double least = std::numeric_limits<double>::infinity();
  for (const ScoredPlan& s : score_everything(cluster)) {
    least = std::min(least, memory_overshoot(s.prediction, cluster, 4).total());
  }
  EXPECT_EQ(result.closest_overshoot->total(), least);
}

TEST(PlanSearch, TwoRunsAreIdentical) {
  const ClusterSpec cluster = small_cluster(0.004);
  const PlanSearchResult a = search_plans(small_model(), cluster, small_train(), exhaustive_options());
  const PlanSearchResult b = search_plans(small_model(), cluster, small_train(), exhaustive_options());
  EXPECT_EQ(a.dropped, b.dropped);
  EXPECT_EQ(a.candidates, b.candidates);
  ASSERT_EQ(a.top.size(), b.top.size());
  for (std::size_t i = 0; i < a.top.size(); ++i) {
    EXPECT_EQ(a.top[i].plan, b.top[i].plan);
    EXPECT_EQ(a.top[i].prediction.to_json().dump(), b.top[i].prediction.to_json().dump());
  }
}

TEST(PlanSearch, RankedFiguresArePredictsExactly) {
  // The search scores through its PredictionCache, memory first, and ranks by the replayed
  // step time; every kept plan's Prediction (and the closest misfit's) is bitwise what
  // predict() gives that plan on its own.
  for (double device_gib : {80.0, 0.004, 64.0 / (1024 * 1024)}) {
    const ClusterSpec cluster = small_cluster(device_gib);
    PlannerOptions options;
    options.top_k = 10;
    const PlanSearchResult result = search_plans(small_model(), cluster, small_train(), options);
    std::vector<ScoredPlan> kept = result.top;
    if (result.closest) kept.push_back(*result.closest);
    ASSERT_FALSE(kept.empty());
    for (const ScoredPlan& s : kept) {
      EXPECT_EQ(s.prediction.to_json().dump(),
                predict(small_model(), cluster, small_train(), s.plan).to_json().dump())
          << s.plan.label();
    }
  }
}

TEST(PlanSearch, SkippingReplaysByTheBoundKeepsTheSameTopK) {
  // Replays skipped because a plan's lower bound is slower than the k-th best change nothing.
  for (double device_gib : {80.0, 0.004, 0.003}) {
    for (std::int64_t k : {1, 5, 30}) {
      const ClusterSpec cluster = small_cluster(device_gib);
      PlannerOptions options;
      options.top_k = k;
      const PlanSearchResult bounded = search_plans(small_model(), cluster, small_train(), options);
      options.replay_all = true;
      const PlanSearchResult all = search_plans(small_model(), cluster, small_train(), options);
      EXPECT_EQ(bounded.fitting, all.fitting);
      ASSERT_EQ(bounded.top.size(), all.top.size()) << device_gib << " k=" << k;
      for (std::size_t i = 0; i < all.top.size(); ++i) {
        EXPECT_EQ(bounded.top[i].plan, all.top[i].plan) << device_gib << " k=" << k << " #" << i;
        EXPECT_EQ(bounded.top[i].prediction.to_json().dump(), all.top[i].prediction.to_json().dump());
      }
    }
  }
}

// The memory floor drops plans before their walk (planner.cc): every figure of the result
// is the one the search gives walking every plan. Device memory from roomy to none fitting,
// host memory tight enough that the closest misfit's overshoot has a host share, headroom
// reserved, the CPU convention, GPT- and Llama-shaped models.
TEST(PlanSearch, MemoryFloorChangesNothing) {
  ModelSpec llama = small_model();
  llama.name = "small-llama";
  llama.ffn_hidden = 176;
  llama.norm = NormKind::kRmsNorm;
  llama.mlp = MlpKind::kSwiglu;
  llama.position = PositionKind::kRope;
  llama.kv_heads = 2;
  llama.tied_output = false;
  llama.biases = false;
  std::int64_t floor_dropped = 0;
  for (const ModelSpec& model : {small_model(), llama}) {
    for (double device_gib : {80.0, 0.006, 0.004, 0.003, 64.0 / (1024 * 1024)}) {
      for (int variant = 0; variant < 4; ++variant) {
        ClusterSpec cluster = small_cluster(device_gib);
        if (variant == 1) cluster.host.memory_bytes = 0.0005 * units::kGiB;  // offload overshoots too
        if (variant == 2) {
          cluster.headroom.context_bytes = 0.0005 * units::kGiB;
          cluster.headroom.fragmentation_fraction = 0.05;
        }
        if (variant == 3) cluster.backend = Backend::kCpu;
        TrainSpec train = small_train();
        if (variant == 3) train.precision = Precision::kFp32;
        const std::string what = model.name + " " + std::to_string(device_gib) + " GiB variant " +
                                 std::to_string(variant);
        PlannerOptions options;
        options.top_k = 10;
        const PlanSearchResult floored = search_plans(model, cluster, train, options);
        options.memory_floor = false;
        const PlanSearchResult walked = search_plans(model, cluster, train, options);
        EXPECT_EQ(walked.memory_walked, walked.scored - walked.dropped.count(drop_reason::kPlanCheck)) << what;
        floor_dropped += walked.memory_walked - floored.memory_walked;
        EXPECT_EQ(floored.candidates, walked.candidates) << what;
        EXPECT_EQ(floored.scored, walked.scored) << what;
        EXPECT_EQ(floored.fitting, walked.fitting) << what;
        EXPECT_EQ(floored.pruned, walked.pruned) << what;
        EXPECT_EQ(floored.dropped, walked.dropped) << what;
        EXPECT_EQ(floored.top_reason, walked.top_reason) << what;
        ASSERT_EQ(floored.top.size(), walked.top.size()) << what;
        for (std::size_t i = 0; i < walked.top.size(); ++i) {
          EXPECT_EQ(floored.top[i].plan, walked.top[i].plan) << what << " #" << i;
          EXPECT_EQ(floored.top[i].prediction.to_json().dump(), walked.top[i].prediction.to_json().dump())
              << what << " #" << i;
        }
        ASSERT_EQ(floored.closest.has_value(), walked.closest.has_value()) << what;
        if (!walked.closest) continue;
        EXPECT_EQ(floored.closest->plan, walked.closest->plan) << what;
        EXPECT_EQ(floored.closest->prediction.to_json().dump(), walked.closest->prediction.to_json().dump())
            << what;
        EXPECT_EQ(floored.closest_overshoot->total(), walked.closest_overshoot->total()) << what;
      }
    }
  }
  // The floor did drop plans (else this compared a search with itself).
  EXPECT_GT(floor_dropped, 1000);
}

// Threads score shares of the base plans and merge them before the ranking (planner.cc):
// every figure of the result is the one thread's, whatever the share count, from roomy
// memory (top plans compared) to none fitting (the closest misfit compared), with and without
// the memory floor (whose unwalked misfits are merged too).
TEST(PlanSearch, ThreadCountChangesNothing) {
  const auto dump = [](const PlanSearchResult& r) {
    std::string s = fmt::format("{} {} {} {} {} {} {} [{}]", r.candidates, r.scored, r.fitting, r.pruned,
                                r.memory_walked, r.top_reason, r.deadlock_example, r.top.size());
    for (const auto& [reason, count] : r.dropped) s += fmt::format(" {}={}", reason, count);
    for (const ScoredPlan& p : r.top) s += " " + p.plan.label() + " " + p.prediction.to_json().dump();
    if (r.closest) s += " closest " + r.closest->plan.label() + " " + r.closest->prediction.to_json().dump();
    return s;
  };
  int compared_top = 0, compared_closest = 0;
  for (double device_gib : {80.0, 0.004, 0.003, 64.0 / (1024 * 1024)}) {
    for (const bool floor : {true, false}) {
      PlannerOptions options;
      options.top_k = 10;
      options.memory_floor = floor;
      options.threads = 1;
      const PlanSearchResult one = search_plans(small_model(), small_cluster(device_gib), small_train(), options);
      compared_top += one.top.empty() ? 0 : 1;
      compared_closest += one.closest ? 1 : 0;
      for (int threads : {2, 3, 7}) {
        options.threads = threads;
        EXPECT_EQ(dump(search_plans(small_model(), small_cluster(device_gib), small_train(), options)), dump(one))
            << device_gib << " GiB, floor " << floor << ", " << threads << " threads";
      }
    }
  }
  // Both kinds of result were compared: plans that fit, and a closest misfit.
  EXPECT_GT(compared_top, 0);
  EXPECT_GT(compared_closest, 0);
}

TEST(PlanSearch, RejectsImpossibleRequests) {
  PlannerOptions options;
  options.gpus = 5;  // more than the 4 GPUs of one node
  EXPECT_THROW(search_plans(small_model(), small_cluster(), small_train(), options), ConfigError);
  options.gpus = 6;  // two nodes of 4: 6 GPUs would use part of a node while spanning two
  EXPECT_THROW(search_plans(small_model(), small_cluster(80, 2), small_train(), options),
               ConfigError);
  options.gpus = 2;  // part of one node is fine
  EXPECT_EQ(search_plans(small_model(), small_cluster(80, 2), small_train(), options).gpus, 2);
}

TEST(Ranking, TiesBrokenByMemoryThenPlanOrder) {
  ScoredPlan a, b;
  a.prediction.tokens_per_s = b.prediction.tokens_per_s = 1000;
  a.prediction.memory_bytes.device = 10;
  b.prediction.memory_bytes.device = 20;
  EXPECT_TRUE(ranks_before(a, b));
  EXPECT_FALSE(ranks_before(b, a));
  b.prediction.memory_bytes.device = 10;
  b.plan.tp = 2;  // same speed, same memory: t = 1 < t = 2 in the plan order
  EXPECT_TRUE(ranks_before(a, b));
  EXPECT_FALSE(ranks_before(a, a));
  b.prediction.tokens_per_s = 1001;
  EXPECT_TRUE(ranks_before(b, a));
}

TEST(MemoryOvershoot, HostAndNvmeCountEveryRankOfANode) {
  using namespace units;
  const ClusterSpec cluster = small_cluster(80);  // 80 GiB device, 1024 GiB host, 4000 GB NVMe
  Prediction p;
  p.memory_bytes = {81 * kGiB, 300 * kGiB, 900 * kGB};
  // 4 ranks per node: host 4 x 300 = 1200 GiB against the usable 1024 x (1 - 0.019) - 4 x
  // 32 MiB = 1004.418 GiB (the default host headroom, backend_facts.h), NVMe 3600 GB (400
  // under).
  const double usable4 = 1024 * kGiB * (1 - 0.019) - 4 * 32 * kMiB;
  const MemoryOvershoot four = memory_overshoot(p, cluster, 4);
  EXPECT_DOUBLE_EQ(four.device_bytes, 1 * kGiB);
  EXPECT_DOUBLE_EQ(four.host_bytes, 1200 * kGiB - usable4);
  EXPECT_DOUBLE_EQ(four.nvme_bytes, -400 * kGB);
  EXPECT_DOUBLE_EQ(four.total(), 1 * kGiB + 1200 * kGiB - usable4);
  // A 2-GPU plan puts 2 ranks on the node: 600 GiB host fits.
  EXPECT_DOUBLE_EQ(memory_overshoot(p, cluster, 2).host_bytes,
                   600 * kGiB - (1024 * kGiB * (1 - 0.019) - 2 * 32 * kMiB));
  // A cluster file's "host_headroom" replaces the default: none reserved, the whole node.
  ClusterSpec bare = cluster;
  bare.host_headroom.source = "a file that reserves nothing";
  EXPECT_DOUBLE_EQ(memory_overshoot(p, bare, 4).host_bytes, 176 * kGiB);
}

// A 128 GiB node of 8 ranks leaves them 128 x 0.981 - 8 x 32 MiB = 125.318 GiB by the default
// host headroom: 119.66 GiB of a plan's host bytes fit, 126 GiB (under the node's 128) do not.
TEST(MemoryOvershoot, HostMemoryIsRankedAgainstWhatIsUsable) {
  using namespace units;
  ClusterSpec cluster = small_cluster(80);
  cluster.gpus_per_node = 8;
  cluster.host.memory_bytes = 128 * kGiB;
  Prediction p;
  p.memory_bytes = {1 * kGiB, 119.66 / 8 * kGiB, 0};
  EXPECT_TRUE(memory_overshoot(p, cluster, 8).fits());
  p.memory_bytes.host = 126.0 / 8 * kGiB;
  EXPECT_FALSE(memory_overshoot(p, cluster, 8).fits());
  EXPECT_NEAR(memory_overshoot(p, cluster, 8).host_bytes / kGiB, 126 - 125.318, 1e-3);
}

}  // namespace
}  // namespace strata
