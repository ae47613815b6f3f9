// predict() through a PredictionCache (the planner's path: a shape's skeleton, the plan's
// distinct ranks taken from a pipeline of min(p, 3) ranks) gives bitwise the Prediction of
// predict() without one (the plan's own Program, every rank priced), over a grid of plans
// of every schedule, p, v, ZeRO stage, offload, sequence parallelism, recomputation and
// convention, on the streams (CUDA) and the serial (CPU) backend; predict_step_time is its
// step time, and predict_step_time_bound never exceeds it.
#include "cost_model/pricing/cost_model.h"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "tests/cost_model/bundled_configs.h"

namespace strata {
namespace {

using testing::bundled_cluster;

// 12 layers so that p = 1, 2, 3, 4 and v = 1, 2, 3 all divide them.
ModelSpec model_of() {
  ModelSpec m;
  m.name = "test";
  m.layers = 12;
  m.hidden = 256;
  m.heads = 8;
  m.ffn_hidden = 1024;
  m.seq_len = 128;
  m.vocab = 1000;
  return m;
}

void expect_same(const Prediction& a, const Prediction& b) {
  EXPECT_EQ(a.step_time_s, b.step_time_s);
  EXPECT_EQ(a.parts.forward_s, b.parts.forward_s);
  EXPECT_EQ(a.parts.backward_s, b.parts.backward_s);
  EXPECT_EQ(a.parts.recompute_s, b.parts.recompute_s);
  EXPECT_EQ(a.parts.tp_comm_s, b.parts.tp_comm_s);
  EXPECT_EQ(a.parts.pp_comm_s, b.parts.pp_comm_s);
  EXPECT_EQ(a.parts.dp_comm_s, b.parts.dp_comm_s);
  EXPECT_EQ(a.parts.offload_s, b.parts.offload_s);
  EXPECT_EQ(a.parts.optimizer_s, b.parts.optimizer_s);
  EXPECT_EQ(a.parts.bubble_s, b.parts.bubble_s);
  EXPECT_EQ(a.tokens_per_s, b.tokens_per_s);
  EXPECT_EQ(a.to_json().dump(), b.to_json().dump());
}

TEST(PredictionCache, GivesPredictsFiguresBitwise) {
  const ModelSpec model = model_of();
  Profile profile;  // a few measured rates, so that the profile's paths are taken too
  profile.threads_per_rank = 1;
  profile.op_overhead_s = 2e-6;
  profile.gemm.push_back({128, 256, 256, 5e9});
  int plans = 0;
  for (const std::string& name : {std::string("selene-a100"), std::string("local-cpu")}) {
    const ClusterSpec cluster = bundled_cluster(name);
    const Profile* prof = name == "local-cpu" ? &profile : nullptr;
    PredictionCache cache;
    // The last two: uneven stages (12 layers: 2 | 5 | 5 on p = 3; 3 | 3 3 3 on p = 4).
    for (auto [kind, p, v, first, last] : {std::tuple{ScheduleKind::kOneFOneB, 1, 1, 0, 0},
                                           {ScheduleKind::kGpipe, 2, 1, 0, 0},
                                           {ScheduleKind::kOneFOneB, 3, 1, 0, 0},
                                           {ScheduleKind::kOneFOneB, 4, 1, 0, 0},
                                           {ScheduleKind::kInterleaved, 2, 3, 0, 0},
                                           {ScheduleKind::kInterleaved, 4, 3, 0, 0},
                                           {ScheduleKind::kOneFOneB, 3, 1, 2, 5},
                                           {ScheduleKind::kGpipe, 4, 1, 3, 0}}) {
      for (int zero : {0, 1, 2, 3}) {
        for (const OffloadPlan& off :
             {OffloadPlan{}, OffloadPlan{OffloadTier::kCpu, OffloadTier::kNone, OffloadTier::kNone},
              OffloadPlan{OffloadTier::kCpu, OffloadTier::kCpu, OffloadTier::kNone},
              OffloadPlan{OffloadTier::kNvme, OffloadTier::kCpu, OffloadTier::kCpu}}) {
          if (off.gradients != OffloadTier::kNone && zero < 2) continue;
          if (off.params != OffloadTier::kNone && zero < 3) continue;
          for (bool sp : {false, true}) {
            for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
              Plan plan;
              plan.tp = name == "local-cpu" || p == 3 ? 1 : 2;  // whole nodes or one
              plan.pp = p;
              plan.dp = 2;
              plan.virtual_stages = v;
              plan.first_stage_layers = first;
              plan.last_stage_layers = last;
              plan.schedule = kind;
              plan.zero_stage = zero;
              plan.offload = off;
              plan.sequence_parallel = sp && plan.tp > 1;
              plan.recompute = rc;
              TrainSpec train;
              train.global_batch = 2 * 2 * p;  // m = 2 p
              for (bool published : {false, true}) {
                SCOPED_TRACE(fmt::format("{} {}{}", name, plan.label(), published ? " published" : ""));
                CostModelOptions options;
                if (published) options.conventions = megatron_lm_2021_conventions();
                const Prediction direct = predict(model, cluster, train, plan, prof, options);
                const Prediction cached = predict(model, cluster, train, plan, prof, options, cache);
                expect_same(direct, cached);
                EXPECT_EQ(predict_step_time(model, cluster, train, plan, prof, options, cache),
                          direct.step_time_s);
                EXPECT_LE(predict_step_time_bound(model, cluster, train, plan, prof, options, cache),
                          direct.step_time_s);
                ++plans;
              }
            }
          }
        }
      }
    }
    EXPECT_GT(cache.shapes(), 0u);
  }
  EXPECT_GT(plans, 300);
}

TEST(PredictionCache, ReplaysOnlyNewInputs) {
  // Two plans whose pipelines replay the same durations (ZeRO 0 and 1 differ only in the
  // tail: the all-reduce is the same) share one replay; their step times still differ by
  // their tails.
  const ModelSpec model = model_of();
  const ClusterSpec cluster = bundled_cluster("selene-a100");
  Plan plan;
  plan.tp = 2;
  plan.pp = 4;
  plan.dp = 2;
  TrainSpec train;
  train.global_batch = 16;
  PredictionCache cache;
  const double z0 = predict_step_time(model, cluster, train, plan, nullptr, {}, cache);
  plan.zero_stage = 1;
  const double z1 = predict_step_time(model, cluster, train, plan, nullptr, {}, cache);
  EXPECT_EQ(cache.replays(), 1u);
  EXPECT_EQ(cache.replay_hits(), 1u);
  EXPECT_NE(z0, z1);
  EXPECT_EQ(z1, predict(model, cluster, train, plan).step_time_s);
}

}  // namespace
}  // namespace strata
