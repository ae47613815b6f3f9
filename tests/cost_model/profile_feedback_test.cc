// The loop's feedback (profile_feedback.h): each run's factors by bisection, the trimmed
// mean over the last runs, the clamps, which run fits which factor, the bad input; and that the
// factors reach every compute and communication time of a real prediction.
#include "cost_model/pricing/profile_feedback.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/train_spec.h"

namespace strata {
namespace {

double scale_of(double s) { return s > 0 ? s : 1.0; }

// A synthetic step: 40 ms of compute (30 forward + backward, 10 optimizer) times the compute
// factor and the busy-cores slowdown, plus `comm_s` of tensor-parallel
// communication times the comm factor, plus 100 collectives' time-sliced waits.
StepReport synthetic(const Profile& p, double comm_s) {
  StepReport r;
  const double c = scale_of(p.compute_time_scale) * scale_of(p.busy_cores_slowdown);
  r.parts.forward_s = 0.010 * c;
  r.parts.backward_s = 0.020 * c;
  r.parts.optimizer_s = 0.010 * c;
  r.parts.tp_comm_s =
      comm_s * scale_of(p.comm_time_scale) + 100.0 * p.time_sliced_sync_s;
  r.step_time_s = r.parts.sum();
  return r;
}
StepReport measured(double compute_s, double comm_s) {
  StepReport r;
  r.parts.forward_s = compute_s;
  r.parts.tp_comm_s = comm_s;
  r.step_time_s = compute_s + comm_s;
  return r;
}
const auto no_comm = [](const Profile& p) { return synthetic(p, 0.0); };
constexpr RunPlacement kOneRank{1, 2};
constexpr RunPlacement kTwoRanks{2, 2};
const auto with_comm = [](const Profile& p) { return synthetic(p, 0.020); };

TEST(ProfileFeedback, RunWithoutCommunicationFitsTheComputeFactorOnItsStep) {
  Profile p;
  // 80 ms measured against 40 ms x s: s = 2. No communication: comm factor untouched.
  const FeedbackFit fit = fold_run_into_profile(p, measured(0.080, 0.0), kOneRank, no_comm);
  EXPECT_TRUE(fit.compute.fitted);
  EXPECT_NEAR(fit.predicted_step_s, 0.040, 1e-15);  // with the profile as it was (s = 1)
  EXPECT_NEAR(fit.compute.run_scale, 2.0, 1e-9);
  EXPECT_NEAR(p.compute_time_scale, 2.0, 1e-9);
  ASSERT_EQ(p.compute_time_scale_asks.size(), 1u);
  EXPECT_DOUBLE_EQ(p.compute_time_scale_asks[0], fit.compute.run_scale);
  EXPECT_FALSE(fit.comm.fitted);
  EXPECT_EQ(p.comm_time_scale, 0.0);
}

TEST(ProfileFeedback, RunOfSeveralRanksFitsCommFromItsPartsThenBusyCoresFromItsStep) {
  Profile p;
  p.compute_time_scale = 1.5;  // by hand
  // Predicted: 40 ms x 1.5 of compute and 20 ms of communication. Measured: 60 ms of
  // communication (a factor of 3), and a step of 150 ms: with the comm factor held at 3,
  // the compute takes 90 ms = 60 x 1.5, the busy-cores slowdown.
  const FeedbackFit fit = fold_run_into_profile(p, measured(0.090, 0.060), kTwoRanks, with_comm);
  EXPECT_FALSE(fit.compute.fitted);
  EXPECT_NEAR(fit.comm.run_scale, 3.0, 1e-9);
  EXPECT_NEAR(p.comm_time_scale, 3.0, 1e-9);
  EXPECT_EQ(p.comm_time_scale_asks.size(), 1u);
  EXPECT_NEAR(fit.busy_cores.run_scale, 1.5, 1e-9);
  EXPECT_NEAR(p.busy_cores_slowdown, 1.5, 1e-9);
  EXPECT_EQ(p.busy_cores, 2);  // recorded at the node's cores
  EXPECT_DOUBLE_EQ(p.compute_time_scale, 1.5);
  EXPECT_TRUE(p.compute_time_scale_asks.empty());
  // Under kMinCommShare of the step (0.3 of 40.3 ms): only the busy-cores slowdown.
  Profile r;
  const auto little_comm = [](const Profile& x) { return synthetic(x, 0.0003); };
  const FeedbackFit small = fold_run_into_profile(r, measured(0.060, 0.0003), kTwoRanks, little_comm);
  EXPECT_FALSE(small.comm.fitted);
  EXPECT_NEAR(small.busy_cores.run_scale, (0.0603 - 0.0003) / 0.040, 1e-9);
  // A pipeline (bubble predicted): its measured communication holds the stages' waits, so
  // only the busy-cores slowdown.
  Profile q;
  const auto pipelined = [](const Profile& x) {
    StepReport rep = synthetic(x, 0.020);
    rep.parts.bubble_s = 0.005;
    rep.step_time_s += 0.005;
    return rep;
  };
  const FeedbackFit pipe = fold_run_into_profile(q, measured(0.070, 0.020), kTwoRanks, pipelined);
  EXPECT_FALSE(pipe.comm.fitted);
  EXPECT_TRUE(pipe.busy_cores.fitted);
}

// Which factors a two-rank run fits depends on the plan and the microbenchmarks, not on the
// factors fitted so far: a comm factor of 8 makes the 0.3 ms of communication 2.4 of 42.4 ms
// (> kMinCommShare), yet the run fits no comm factor (else the comm factor would decide
// whether a run fits it).
TEST(ProfileFeedback, WhichFactorsARunFitsIgnoresTheFittedFactors) {
  Profile p;
  p.comm_time_scale = 8.0;
  p.comm_time_scale_asks = {8.0};
  const auto little_comm = [](const Profile& x) { return synthetic(x, 0.0003); };
  const FeedbackFit fit = fold_run_into_profile(p, measured(0.060, 0.0024), kTwoRanks, little_comm);
  EXPECT_TRUE(fit.busy_cores.fitted);
  EXPECT_FALSE(fit.comm.fitted);
  EXPECT_NEAR(fit.busy_cores.run_scale, (0.0624 - 0.0024) / 0.040, 1e-9);
  EXPECT_DOUBLE_EQ(p.comm_time_scale, 8.0);
}

TEST(ProfileFeedback, BusyCoresSlowdownAveragesWithTheCalibration) {
  Profile p;
  p.busy_cores = 2;
  p.busy_cores_slowdown = 1.6;  // the calibration's measurement, the first ask
  p.busy_cores_slowdown_asks = {1.6};
  // Measured faster than the unslowed 40 ms: the run asks for 35 / 40 = 0.875 (on a VM two
  // busy ranks can each outrun one alone), and the mean of two is sqrt(1.6 x 0.875).
  // The compute factor is one-rank runs' business: untouched.
  const FeedbackFit fit = fold_run_into_profile(p, measured(0.035, 0.0), kTwoRanks, no_comm);
  EXPECT_NEAR(fit.busy_cores.run_scale, 0.875, 1e-9);
  EXPECT_NEAR(p.busy_cores_slowdown, std::sqrt(1.6 * 0.875), 1e-9);
  EXPECT_EQ(p.busy_cores_slowdown_asks.size(), 2u);
  EXPECT_FALSE(fit.compute.fitted);
  EXPECT_EQ(p.compute_time_scale, 0.0);
  // A calibration at another core count starts the average afresh at this node's.
  p.busy_cores = 4;
  fold_run_into_profile(p, measured(0.048, 0.0), kTwoRanks, no_comm);
  EXPECT_EQ(p.busy_cores, 2);
  EXPECT_NEAR(p.busy_cores_slowdown, 1.2, 1e-9);
  EXPECT_EQ(p.busy_cores_slowdown_asks.size(), 1u);
}

TEST(ProfileFeedback, InterquartileMeanOfAsks) {
  EXPECT_EQ(interquartile_mean_ask({}), 0.0);
  EXPECT_NEAR(interquartile_mean_ask({4.0, 1.0, 2.0}), 2.0, 1e-12);  // (1 x 2 x 4)^(1/3), none dropped
  EXPECT_NEAR(interquartile_mean_ask({1.0, 9.0, 4.0, 0.5}), 2.0, 1e-12);  // sqrt(1 x 4)
  // 8 asks: the lowest two and the highest two dropped, (1 x 1 x 4 x 4)^(1/4) = 2.
  EXPECT_NEAR(interquartile_mean_ask({0.1, 1.0, 8.0, 4.0, 1.0, 0.2, 4.0, 100.0}), 2.0, 1e-12);
}

TEST(ProfileFeedback, TheFactorIsTheTrimmedMeanOfTheLastRuns) {
  Profile p;
  p.compute_time_scale = 2.0;
  p.compute_time_scale_asks = {2.0, 2.0, 2.0};
  // A stray run asking for 0.5 (20 ms): of {0.5, 2, 2, 2} the lowest and the highest are
  // dropped, so the factor stays sqrt(2 x 2).
  const FeedbackFit fit = fold_run_into_profile(p, measured(0.020, 0.0), kOneRank, no_comm);
  EXPECT_NEAR(fit.compute.run_scale, 0.5, 1e-9);
  EXPECT_NEAR(p.compute_time_scale, 2.0, 1e-9);
  EXPECT_EQ(fit.compute.runs, 4u);
  // A second: of {0.5, 0.5, 2, 2, 2}, (0.5 x 2 x 2)^(1/3); a third: of {0.5 x 3, 2 x 3},
  // sqrt(0.5 x 2).
  fold_run_into_profile(p, measured(0.020, 0.0), kOneRank, no_comm);
  EXPECT_NEAR(p.compute_time_scale, std::cbrt(2.0), 1e-9);
  fold_run_into_profile(p, measured(0.020, 0.0), kOneRank, no_comm);
  EXPECT_NEAR(p.compute_time_scale, 1.0, 1e-9);
  // The window keeps the last kFeedbackWindow: after that many runs at 0.5, 0.5.
  for (std::size_t i = 0; i < kFeedbackWindow; ++i) {
    fold_run_into_profile(p, measured(0.020, 0.0), kOneRank, no_comm);
  }
  EXPECT_EQ(p.compute_time_scale_asks.size(), kFeedbackWindow);
  EXPECT_NEAR(p.compute_time_scale, 0.5, 1e-9);
  // A factor set by hand (no asks) counts as one: {2, 0.5} -> 1.
  Profile q;
  q.compute_time_scale = 2.0;
  fold_run_into_profile(q, measured(0.020, 0.0), kOneRank, no_comm);
  EXPECT_NEAR(q.compute_time_scale, 1.0, 1e-9);
  EXPECT_EQ(q.compute_time_scale_asks.size(), 2u);
}

TEST(ProfileFeedback, ClampsFitsTimeSlicedRunsAndRejectsBadMeasurements) {
  Profile p;
  // Above what s = 8 predicts (0.32 s), and below what s = 1/8 does (5 ms).
  EXPECT_DOUBLE_EQ(fold_run_into_profile(p, measured(5.0, 0.0), kOneRank, no_comm).compute.run_scale,
                   kMaxTimeScale);
  p = Profile{};
  EXPECT_DOUBLE_EQ(
      fold_run_into_profile(p, measured(0.001, 0.0), kOneRank, no_comm).compute.run_scale,
      kMinTimeScale);
  // Ranks time-sharing the cores (4 on 2): the time-sliced wait, the others held.
  // 80 ms measured against 40 + 20 + 100 w: w = 200 us.
  p = Profile{};
  const FeedbackFit sliced =
      fold_run_into_profile(p, measured(0.06, 0.02), RunPlacement{4, 2}, with_comm);
  EXPECT_FALSE(sliced.compute.fitted);
  EXPECT_FALSE(sliced.comm.fitted);
  EXPECT_NEAR(sliced.time_sliced.run_scale, 200e-6, 1e-12);
  EXPECT_NEAR(p.time_sliced_sync_s, 200e-6, 1e-12);
  EXPECT_EQ(p.time_sliced_sync_asks.size(), 1u);
  EXPECT_EQ(p.compute_time_scale, 0.0);
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    Profile q;
    StepReport m = measured(0.05, 0.0);
    m.step_time_s = bad;
    EXPECT_THROW(fold_run_into_profile(q, m, kOneRank, no_comm), ConfigError) << bad;
    EXPECT_EQ(q.compute_time_scale, 0.0);
  }
}

// The tiny model on the 2-core CPU cluster.
struct TinyRun {
  ModelSpec model =
      ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/tiny.json");
  ClusterSpec cluster =
      ClusterSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/clusters/local-cpu.json");
  TrainSpec train =
      TrainSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/train/tiny.json");
};

Profile tiny_profile() {
  Profile p;
  p.threads_per_rank = 1;
  p.gemm.push_back({64, 64, 64, 10e9});
  p.elementwise_bytes_per_s = 2e9;
  p.device_adam_params_per_s = 3e8;
  // The tensor-parallel plan below communicates over kMinCommShare (asserted there).
  p.collectives.push_back({"all_reduce", "intra_node", 2, 20e-6, 3e9});
  return p;
}

TEST(ProfileFeedback, TheFactorsScaleEveryComputeAndCommunicationTime) {
  const TinyRun run;
  Plan plan;  // t = p = d = 1
  Profile p = tiny_profile();
  const Prediction base = predict(run.model, run.cluster, run.train, plan, &p);
  p.compute_time_scale = 1.5;
  const Prediction scaled = predict(run.model, run.cluster, run.train, plan, &p);
  EXPECT_NEAR(scaled.parts.forward_s, 1.5 * base.parts.forward_s, 1e-12);
  EXPECT_NEAR(scaled.parts.backward_s, 1.5 * base.parts.backward_s, 1e-12);
  EXPECT_NEAR(scaled.parts.optimizer_s, 1.5 * base.parts.optimizer_s, 1e-12);
  // One rank, no communication: the whole step scales.
  EXPECT_NEAR(scaled.step_time_s, 1.5 * base.step_time_s, 1e-9 * base.step_time_s);

  plan.tp = 2;  // tensor-parallel all-reduces, nothing else communicates
  p = tiny_profile();
  const Prediction tp = predict(run.model, run.cluster, run.train, plan, &p);
  ASSERT_GT(tp.parts.tp_comm_s, 0.0);
  p.comm_time_scale = 2.0;
  const Prediction tp_scaled = predict(run.model, run.cluster, run.train, plan, &p);
  EXPECT_NEAR(tp_scaled.parts.tp_comm_s, 2.0 * tp.parts.tp_comm_s, 1e-12);
  EXPECT_NEAR(tp_scaled.parts.forward_s, tp.parts.forward_s, 1e-15);

  // The time-sliced wait: only on ranks that time-share the 2 cores, once per collective,
  // on top of the comm factor. tp2 (2 ranks) is untouched.
  const double wait_s = 50e-6;
  p.time_sliced_sync_s = wait_s;
  const Prediction tp2_sliced = predict(run.model, run.cluster, run.train, plan, &p);
  EXPECT_DOUBLE_EQ(tp2_sliced.step_time_s, tp_scaled.step_time_s);
  plan.dp = 2;  // tp2-dp2: 4 ranks
  p.comm_time_scale = 0;
  p.time_sliced_sync_s = 0;
  const Prediction four = predict(run.model, run.cluster, run.train, plan, &p);
  p.time_sliced_sync_s = wait_s;
  const Prediction four_sliced = predict(run.model, run.cluster, run.train, plan, &p);
  // Tensor-parallel all-reduces per step of a rank, over 8 / (d 2 x b 1) = 4 micro-batches:
  // per layer 2 forward + 2 backward (8 layers: 128), plus the vocab-parallel embedding's
  // forward and the head's backward (8): 136, each waiting 50 us more (4 ranks on 2 cores:
  // one other rank ahead on each core).
  EXPECT_NEAR(four_sliced.parts.tp_comm_s - four.parts.tp_comm_s, 136 * wait_s, 1e-12);
  EXPECT_DOUBLE_EQ(four_sliced.parts.forward_s, four.parts.forward_s);
  // tp2-dp4: 8 ranks on 2 cores, three others ahead on each core: 3 x 50 us, over
  // 8 / (d 4 x b 1) = 2 micro-batches, 68 all-reduces.
  plan.dp = 4;
  p.time_sliced_sync_s = 0;
  const Prediction eight = predict(run.model, run.cluster, run.train, plan, &p);
  p.time_sliced_sync_s = wait_s;
  const Prediction eight_sliced = predict(run.model, run.cluster, run.train, plan, &p);
  EXPECT_NEAR(eight_sliced.parts.tp_comm_s - eight.parts.tp_comm_s, 68 * 3 * wait_s, 1e-12);
}

TEST(ProfileFeedback, FoldingTheModelsOwnPredictionsReturnsItsFactors) {
  const TinyRun run;
  // "Measurements" that the model predicts at compute 1.3, comm 2.5, busy-cores slowdown 1.4
  // and time-sliced wait 30 us, folded in the order the factors build on each other: one
  // rank (compute), tp2 (comm from its parts, then busy cores from its step), tp2-dp2 (four
  // ranks on the 2 cores: time-sliced). Each bisection inverts the model.
  Profile truth = tiny_profile();
  truth.compute_time_scale = 1.3;
  truth.comm_time_scale = 2.5;
  truth.busy_cores = 2;
  truth.busy_cores_slowdown = 1.4;
  truth.time_sliced_sync_s = 30e-6;
  Profile fresh = tiny_profile();
  const auto fold = [&](const Plan& plan, const RunPlacement& placement) {
    return fold_run_into_profile(
        fresh, predict(run.model, run.cluster, run.train, plan, &truth), placement,
        [&](const Profile& q) { return predict(run.model, run.cluster, run.train, plan, &q); });
  };
  const Plan one_rank;
  EXPECT_NEAR(fold(one_rank, kOneRank).compute.run_scale, 1.3, 1e-6);
  Plan tp2;
  tp2.tp = 2;
  const Prediction raw = predict(run.model, run.cluster, run.train, tp2, &fresh);
  ASSERT_GE(comm_parts_s(raw.parts), kMinCommShare * raw.step_time_s);
  ASSERT_EQ(raw.parts.bubble_s, 0.0);
  const FeedbackFit tp2_fit = fold(tp2, kTwoRanks);
  EXPECT_NEAR(tp2_fit.comm.run_scale, 2.5, 1e-6);
  EXPECT_NEAR(tp2_fit.busy_cores.run_scale, 1.4, 1e-6);
  Plan tp2_dp2 = tp2;
  tp2_dp2.dp = 2;
  EXPECT_NEAR(fold(tp2_dp2, RunPlacement{4, 2}).time_sliced.run_scale, 30e-6, 1e-11);
}

}  // namespace
}  // namespace strata
