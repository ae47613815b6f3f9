// The critical path (cost_model/checks/critical_path.h): worked by hand on a 2-rank 1F1B; the
// timing graph's longest path equal to the max-plus replay's step time for every kind of
// body (ZeRO 0-3, offload, sequence parallelism, regathers) under random durations in both
// modes; and for the bundled GPT-3 175B PTD-P plan and tiny-3d, the path's durations summing
// to the predicted step time.
#include "cost_model/checks/critical_path.h"

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "cost_model/program/chrome_trace.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/errors.h"
#include "cost_model/checks/measured_path.h"
#include "cost_model/checks/path_trace.h"
#include "tests/cost_model/program_test_util.h"

namespace strata {
namespace {

using testing::plan_of;

using Kind = ProgramOpKind;

std::vector<PricedRank> price(const Program& program, const OpCosts& costs, SimulationMode mode) {
  std::vector<PricedRank> priced;
  for (const RankProgram& r : program.ranks) priced.push_back(price_rank(r, costs, mode));
  return priced;
}

double replayed_step(const Program& program, const std::vector<PricedRank>& priced, SimulationMode mode) {
  std::vector<std::int32_t> class_of;
  for (std::size_t r = 0; r < priced.size(); ++r) class_of.push_back(static_cast<std::int32_t>(r));
  return simulate_step(pipeline_skeleton(program), priced, class_of, mode, nullptr, false).step_s;
}

// What every path must be: a chain (each op starts when the one before it ends, or later
// with the gap counted as waiting) whose durations and gaps sum to its length.
void expect_a_chain(const CriticalPath& path) {
  double clock = 0, sum = 0;
  for (const PathOp& op : path.ops) {
    EXPECT_GE(op.start_s, clock - 1e-9 * path.step_s) << op.what;
    sum += op.duration_s + std::max(0.0, op.start_s - clock);
    clock = op.start_s + op.duration_s;
  }
  sum += std::max(0.0, path.step_s - clock);
  EXPECT_NEAR(sum, path.step_s, 1e-9 * path.step_s);
  EXPECT_NEAR(path.shares.sum(), path.step_s, 1e-9 * path.step_s);
  for (const OffPathOp& off : path.largest_off_path) EXPECT_GE(off.slack_s, 0.0) << off.what;
}

// A layer's forward 1/2 and backward 1 per layer (a pass over 2 layers: f = 1, b = 2).
struct HandCosts final : OpCosts {
  StepTimeParts compute(const RankProgram& rank, Part part, std::int32_t, bool forward) const override {
    StepTimeParts t;
    if (part == Part::kLayer) (forward ? t.forward_s : t.backward_s) = forward ? 0.5 : 1.0;
    (void)rank;
    return t;
  }
  StepTimeParts state_move(const RankProgram&, Kind, std::int32_t) const override { return {}; }
  StepTimeParts transfer(const RankProgram&, Kind, std::int32_t) const override { return {}; }
  StepTimeParts tail(const RankProgram&, const ProgramOp&) const override { return {}; }
};

TEST(CriticalPath, OneFOneBOnTwoRanksByHand) {
  // 1F1B, p = 2, m = 2, f = 1, b = 2, free transfers, one clock per rank:
  //   rank 0: F0 [0,1] F1 [1,2] (wait) B0 [4,6] (wait) B1 [7,9]
  //   rank 1: F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]
  // The step, (m + p - 1)(f + b) = 9, is set by rank 0's F0, rank 1's F0 B0 F1 B1, rank 0's
  // B1: 1 + 1 + 2 + 1 + 2 + 2 = 9. Off the path: rank 0's B0 (2 s, it could end at 7: slack
  // 1) and F1 (1 s; it could end at 4: slack 2).
  const Program program = make_program(testing::small_gpt(4), testing::train_of(2),
                                       plan_of(ScheduleKind::kOneFOneB, 2, 1));
  const HandCosts costs;
  const auto priced = price(program, costs, SimulationMode::kSerial);
  const CriticalPath path = critical_path(program, priced, SimulationMode::kSerial);
  EXPECT_DOUBLE_EQ(path.step_s, 9.0);
  expect_a_chain(path);
  std::vector<std::tuple<std::int32_t, Kind, std::int32_t>> passes;
  for (const PathOp& op : path.ops) {
    if (op.duration_s <= 0) continue;
    const ProgramOp& step = program.ranks[static_cast<std::size_t>(op.vertex.rank)].ops[static_cast<std::size_t>(op.vertex.op)];
    const std::tuple<std::int32_t, Kind, std::int32_t> pass{op.vertex.rank, step.kind, step.micro_batch};
    if (passes.empty() || passes.back() != pass) passes.push_back(pass);
  }
  const std::vector<std::tuple<std::int32_t, Kind, std::int32_t>> want{
      {0, Kind::kForward, 0}, {1, Kind::kForward, 0}, {1, Kind::kBackward, 0},
      {1, Kind::kForward, 1}, {1, Kind::kBackward, 1}, {0, Kind::kBackward, 1}};
  EXPECT_EQ(passes, want);
  EXPECT_DOUBLE_EQ(path.shares.compute_s, 9.0);
  EXPECT_DOUBLE_EQ(path.shares.waiting_s, 0.0);
  // The longest off-path ops: rank 0's B0 layers (1 s each, slack 1), then F1's (slack 2).
  ASSERT_GE(path.largest_off_path.size(), 3u);
  EXPECT_NE(path.largest_off_path[0].what.find("rank 0"), std::string::npos);
  EXPECT_NE(path.largest_off_path[0].what.find("backward mb=0"), std::string::npos);
  EXPECT_DOUBLE_EQ(path.largest_off_path[0].duration_s, 1.0);
  EXPECT_DOUBLE_EQ(path.largest_off_path[0].slack_s, 1.0);
  const auto f1 = std::find_if(path.largest_off_path.begin(), path.largest_off_path.end(),
                               [](const OffPathOp& o) { return o.what.find("forward mb=1") != std::string::npos; });
  ASSERT_NE(f1, path.largest_off_path.end());
  EXPECT_DOUBLE_EQ(f1->slack_s, 2.0);
}

// Random durations per (kind, unit, part) and per transfer and tail op.
struct RandomCosts final : OpCosts {
  std::vector<double> table;
  double at(std::size_t i) const { return table[i % table.size()]; }
  StepTimeParts compute(const RankProgram& r, Part part, std::int32_t unit, bool forward) const override {
    StepTimeParts t;
    const double s = at(static_cast<std::size_t>(unit + 1) * 7 + static_cast<std::size_t>(part) * 3 +
                        (forward ? 1 : 0) + static_cast<std::size_t>(r.pp_rank) * 13);
    (forward ? t.forward_s : t.backward_s) = s;
    t.tp_comm_s = 0.1 * s;
    return t;
  }
  StepTimeParts state_move(const RankProgram&, Kind kind, std::int32_t unit) const override {
    StepTimeParts t;
    const double s = at(static_cast<std::size_t>(unit + 1) * 11 + static_cast<std::size_t>(kind) * 5);
    (kind == Kind::kFetch || kind == Kind::kOffloadGrads ? t.offload_s : t.dp_comm_s) = s;
    return t;
  }
  StepTimeParts transfer(const RankProgram& r, Kind kind, std::int32_t chunk) const override {
    StepTimeParts t;
    t.pp_comm_s = at(static_cast<std::size_t>(chunk) * 17 + static_cast<std::size_t>(kind) + static_cast<std::size_t>(r.pp_rank));
    return t;
  }
  StepTimeParts tail(const RankProgram&, const ProgramOp& op) const override {
    StepTimeParts t;
    const double s = at(static_cast<std::size_t>(op.unit + 2) * 19 + static_cast<std::size_t>(op.kind));
    (op.kind == Kind::kOptimizerStep ? t.optimizer_s : t.dp_comm_s) = s;
    return t;
  }
};

// 101 durations drawn uniformly from [0, 2) s.
RandomCosts random_costs(std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0.0, 2.0);
  RandomCosts costs;
  for (int i = 0; i < 101; ++i) costs.table.push_back(u(rng));
  return costs;
}

TEST(CriticalPath, TheLongestPathIsTheReplaysStepForEveryKindOfProgram) {
  std::mt19937 rng(11);
  struct Case {
    ScheduleKind kind;
    std::int64_t p, v, d;
    int zero;
    OffloadTier tier;
    bool sp;
    Recompute recompute;
    bool regathers;
  };
  const Case cases[] = {
      {ScheduleKind::kGpipe, 2, 1, 1, 0, OffloadTier::kNone, false, Recompute::kNone, false},
      {ScheduleKind::kOneFOneB, 3, 1, 2, 1, OffloadTier::kNone, false, Recompute::kNone, false},
      {ScheduleKind::kInterleaved, 2, 2, 2, 2, OffloadTier::kCpu, false, Recompute::kNone, false},
      {ScheduleKind::kOneFOneB, 2, 1, 2, 3, OffloadTier::kNone, true, Recompute::kFull, true},
      {ScheduleKind::kOneFOneB, 2, 1, 2, 3, OffloadTier::kNvme, false, Recompute::kSelective, false},
      {ScheduleKind::kInterleaved, 4, 2, 2, 3, OffloadTier::kCpu, true, Recompute::kFull, false},
      {ScheduleKind::kOneFOneB, 1, 1, 2, 3, OffloadTier::kCpu, false, Recompute::kNone, false},
  };
  for (const Case& c : cases) {
    Plan plan = plan_of(c.kind, c.p, c.v, c.d, c.zero);
    plan.tp = c.sp ? 2 : 1;
    plan.sequence_parallel = c.sp;
    plan.recompute = c.recompute;
    plan.offload.optimizer = c.tier;
    if (c.zero >= 2) plan.offload.gradients = c.tier;
    if (c.zero == 3) plan.offload.params = c.tier;
    ProgramOptions options;
    options.recompute_regathers = c.regathers;
    const Program program = make_program(testing::small_gpt(24), testing::train_of(8 * c.d), plan, options);
    for (SimulationMode mode : {SimulationMode::kStreams, SimulationMode::kSerial}) {
      for (int trial = 0; trial < 3; ++trial) {
        SCOPED_TRACE(plan.label() + " " + to_string(mode) + " trial " + std::to_string(trial));
        const RandomCosts costs = random_costs(rng);
        const auto priced = price(program, costs, mode);
        const CriticalPath path = critical_path(program, priced, mode);
        const double step = replayed_step(program, priced, mode);
        EXPECT_NEAR(path.step_s, step, 1e-9 * step);
        expect_a_chain(path);
        EXPECT_NEAR(path.shares.waiting_s, 0.0, 1e-9 * step);
      }
    }
  }
}

// A Program that carries its host steps into the next step (program.h, "carried"): the
// longest path goes through the carried steps, from the step's start, to the first use that
// waits for each. On one clock (the CPU backend) that is the replay's step exactly: the wait
// shifts the one chain. On streams the replay shifts the whole pipeline by the wait at the
// fetch, which the graph may find slack to hide (the fetch runs ahead of its compute): the
// replay is an upper bound there. Either way carrying costs at most the tail it replaces.
TEST(CriticalPath, CarriedHostStepsAreOnTheLongestPathFromTheStepsStart) {
  std::mt19937 rng(5);
  TrainSpec clipped = testing::train_of(8);
  clipped.optimizer.grad_clip = 1.0;
  const ProgramOptions beside = executor_program_options(Backend::kCpu);
  for (std::int64_t d : {1, 2}) {
    Plan plan = plan_of(ScheduleKind::kOneFOneB, 1, 1, d, 3);
    plan.offload = {OffloadTier::kCpu, OffloadTier::kCpu, OffloadTier::kCpu};
    const Program program = make_program(testing::small_gpt(12), clipped, plan, beside);
    ASSERT_TRUE(program.ranks[0].carries());
    Program waiting = program;  // the same steps, waited for in the tail
    for (RankProgram& rank : waiting.ranks) {
      rank.carried_begin = -1;
      rank.carried_waits.clear();
    }
    for (SimulationMode mode : {SimulationMode::kSerial, SimulationMode::kStreams}) {
      for (int trial = 0; trial < 4; ++trial) {
        SCOPED_TRACE(plan.label() + " " + to_string(mode) + " trial " + std::to_string(trial));
        const RandomCosts costs = random_costs(rng);
        const auto priced = price(program, costs, mode);
        const CriticalPath path = critical_path(program, priced, mode);
        const double step = replayed_step(program, priced, mode);
        if (mode == SimulationMode::kSerial) {
          EXPECT_NEAR(path.step_s, step, 1e-9 * step);
        } else {
          EXPECT_LE(path.step_s, step * (1 + 1e-9));
        }
        expect_a_chain(path);
        const double tail_waited = replayed_step(waiting, price(waiting, costs, mode), mode);
        EXPECT_LE(step, tail_waited * (1 + 1e-9));
      }
    }
  }
}

struct Bundled {
  const char* plan;
  const char* model;
  const char* cluster;
  const char* train;
};

// The by-hand 1F1B above "measured": the simulator's own op times, read back from its trace
// as a run's would be (path_trace.h).
std::vector<MeasuredOp> simulated_as_measured(const Program& program, const OpCosts& costs) {
  const ProgramTimeline timeline = simulate_program(program, costs, SimulationMode::kSerial);
  ChromeTrace trace;
  trace.events = program_trace_events(program, timeline, 0);
  return measured_ops(trace, "simulated");
}

TEST(MeasuredCriticalPath, TheSimulatorsOwnTimesGiveThePredictedPath) {
  // Measured times equal to the priced ones: every op starts when its last predecessor ends,
  // so the measured walk picks the same predecessors and the same path as the predicted one.
  const Program program = make_program(testing::small_gpt(4), testing::train_of(2),
                                       plan_of(ScheduleKind::kOneFOneB, 2, 1));
  const HandCosts costs;
  const auto priced = price(program, costs, SimulationMode::kSerial);
  const CriticalPath predicted = critical_path(program, priced, SimulationMode::kSerial);
  const MeasuredPath measured = measured_critical_path(
      program, priced, SimulationMode::kSerial, simulated_as_measured(program, costs));
  EXPECT_DOUBLE_EQ(measured.path.step_s, 9.0);
  ASSERT_EQ(measured.path.ops.size(), predicted.ops.size());
  ASSERT_EQ(measured.process.size(), predicted.ops.size());
  for (std::size_t i = 0; i < predicted.ops.size(); ++i) {
    EXPECT_EQ(measured.path.ops[i].what, predicted.ops[i].what) << i;
    EXPECT_NEAR(measured.path.ops[i].duration_s, predicted.ops[i].duration_s, 1e-12) << i;
  }
  EXPECT_NEAR(measured.path.shares.compute_s, 9.0, 1e-12);
  expect_a_chain(measured.path);
}

TEST(MeasuredCriticalPath, ALateStartIsWaitingAndAnEarlyReceiveCountsFromItsSend) {
  const Program program = make_program(testing::small_gpt(4), testing::train_of(2),
                                       plan_of(ScheduleKind::kOneFOneB, 2, 1));
  const HandCosts costs;
  const auto priced = price(program, costs, SimulationMode::kSerial);
  std::vector<MeasuredOp> measured = simulated_as_measured(program, costs);
  // Rank 0's B1 (the path's last pass, [7, 9]) starts 0.5 s late: the step ends at 9.5, the
  // path's ops still take 9 s and the 0.5 s is waiting. Rank 0's receive of B1's gradient,
  // posted at 0 instead of when it ran, still counts from the end of rank 1's send: nothing.
  const RankProgram& rank0 = program.ranks[0];
  for (MeasuredOp& m : measured) {
    if (m.rank != 0) continue;
    const ProgramOp& op = rank0.ops[static_cast<std::size_t>(m.op)];
    if (op.kind == Kind::kBackward && op.micro_batch == 1) m.start_s += 0.5;
    if (op.kind == Kind::kRecvBackward && op.micro_batch == 1) {
      m.duration_s += m.start_s;
      m.start_s = 0;
    }
  }
  const MeasuredPath path = measured_critical_path(program, priced, SimulationMode::kSerial, measured);
  EXPECT_DOUBLE_EQ(path.path.step_s, 9.5);
  EXPECT_NEAR(path.path.shares.waiting_s, 0.5, 1e-12);
  double durations = 0;
  for (const PathOp& op : path.path.ops) durations += op.duration_s;
  EXPECT_NEAR(durations, 9.0, 1e-12);
  expect_a_chain(path.path);
  // An op missing from the measurement is named.
  measured.pop_back();
  EXPECT_THROW(measured_critical_path(program, priced, SimulationMode::kSerial, measured), ConfigError);
}

TEST(MeasuredCriticalPath, MarkingATraceMarksEachPathOpOnce) {
  const Program program = make_program(testing::small_gpt(4), testing::train_of(2),
                                       plan_of(ScheduleKind::kOneFOneB, 2, 1));
  const HandCosts costs;
  const auto priced = price(program, costs, SimulationMode::kSerial);
  const CriticalPath path = critical_path(program, priced, SimulationMode::kSerial);
  ChromeTrace trace;
  trace.events = program_trace_events(
      program, simulate_program(program, costs, SimulationMode::kSerial), 0);
  EXPECT_EQ(mark_critical_path(trace, path), path.ops.size());
  double sum = 0;
  for (const TraceEvent& e : trace.events) {
    if (e.args.contains("critical_path")) sum += e.args.at("critical_path_s").get<double>();
  }
  EXPECT_NEAR(sum, 9.0, 1e-12);  // the by-hand step: the path waits for nothing
}

void expect_the_bundled_path_sums_to_the_prediction(const Bundled& b) {
  SCOPED_TRACE(std::string(b.plan) + " on " + b.cluster);
  const std::filesystem::path configs = std::filesystem::path(STRATA_SOURCE_DIR) / "configs";
  const auto load = [&](const char* dir, const char* name) {
    return (configs / dir / (std::string(name) + ".json")).string();
  };
  const Plan plan = Plan::load(load("plans", b.plan));
  const ModelSpec model = ModelSpec::load(load("models", b.model));
  const ClusterSpec cluster = ClusterSpec::load(load("clusters", b.cluster));
  const TrainSpec train = TrainSpec::load(load("train", b.train));
  const StepCriticalPath s = step_critical_path(model, cluster, train, plan);
  const double predicted = predict(model, cluster, train, plan).step_time_s;
  EXPECT_NEAR(s.simulated_step_s, predicted, 1e-12 * predicted);
  EXPECT_NEAR(s.path.step_s, predicted, 1e-9 * predicted);
  double durations = 0;
  for (const PathOp& op : s.path.ops) durations += op.duration_s;
  EXPECT_NEAR(durations, predicted, 1e-9 * predicted);
  expect_a_chain(s.path);
  EXPECT_GT(s.path.shares.compute_s, 0.0);
}

TEST(CriticalPath, Gpt3PtdpPathSumsToThePredictedStep) {
  // Interleaved, t 8, p 12, v 2, d 16: TP comm inside the layers, PP transfers, DP in the
  // tail; the path's durations (with no waiting) are the predicted step.
  expect_the_bundled_path_sums_to_the_prediction({"gpt3-175b-ptdp-1536", "gpt3-175b", "selene-a100", "gpt3-175b"});
}

TEST(CriticalPath, Tiny3dPathSumsToThePredictedStepOnCpuAndGpus) {
  expect_the_bundled_path_sums_to_the_prediction({"tiny-3d", "tiny", "local-cpu", "tiny"});
  expect_the_bundled_path_sums_to_the_prediction({"tiny-3d", "tiny", "selene-a100", "tiny"});
}

}  // namespace
}  // namespace strata
