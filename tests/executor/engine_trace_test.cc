// The engine replays the Program and nothing else: on the CPU backend, the measured trace of
// a step lists exactly the Program's ops in the Program's order (each pass, then its body's
// ops; the tail last), with the micro-batch, chunk and unit each op names. Plans chosen to
// exercise every kind of op a single process can run: ZeRO-3 gathers and releases,
// offloaded parameters fetched ahead, offloaded gradients sent down, interleaved chunks,
// recomputation, ZeRO-1 parameter gathers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cost_model/program/chrome_trace.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/program/program.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/data/corpus.h"
#include "executor/run/rank_training.h"
#include "tests/executor/engine_mpi_environment.h"
#include "tests/executor/engine_test_support.h"
#include "tests/executor/program_trace.h"

namespace strata::testing_support {
namespace {

ClusterSpec cpu_cluster() {
  return ClusterSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/clusters/local-cpu.json");
}

class EngineTrace : public ::testing::TestWithParam<Plan> {};

TEST_P(EngineTrace, MeasuredOpsAreTheProgramsOpsInItsOrder) {
  const Plan plan = GetParam();
  const ModelSpec model = tiny_model();
  const TrainSpec train = tiny_train();
  plan.check_against_model(model, train, "trace plan");
  const auto corpus = data::generated_corpus(train.seed, 1 << 16);
  auto world = MpiCommunicator::duplicate(MPI_COMM_SELF);
  engine::OffloadOptions options;
  options.nvme_dir = ::testing::TempDir();
  engine::RankTraining rank(model, train, plan, *world, TierBudgets{}, corpus, options);
  const std::vector<TracedOp> want = program_order(rank.engine().program());
  for (int step = 0; step < 2; ++step) {
    const engine::StepResult result = rank.engine().step(step);
    const std::vector<TracedOp> got = measured_order(result.events);
    ASSERT_EQ(got.size(), want.size()) << plan.label() << "\n" << describe(rank.engine().program());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].name, want[i].name) << plan.label() << " op " << i;
      EXPECT_EQ(got[i].micro_batch, want[i].micro_batch) << plan.label() << " op " << i;
      EXPECT_EQ(got[i].chunk, want[i].chunk) << plan.label() << " op " << i;
      EXPECT_EQ(got[i].unit, want[i].unit) << plan.label() << " op " << i;
    }
    // The simulator's trace of the same plan's Program names the same ops in the same order.
    const StageOpTimes simulated = stage_op_times(model, cpu_cluster(), train, plan);
    const std::vector<TracedOp> replayed =
        measured_order(program_trace_events(simulated.program, simulated.timeline, 0));
    EXPECT_EQ(replayed, want) << plan.label();
    // Every op was timed: starts never go backwards on either CPU thread, the issuing one
    // and the host stream's (the host optimizer beside the backward, program.h).
    double last_start[2] = {0, 0};
    for (std::size_t i = 0; i < result.events.size(); ++i) {
      const int thread = result.events[i].tid == stream_tid(0, Stream::kHost) ? 1 : 0;
      EXPECT_GE(result.events[i].start_s, last_start[thread]) << i;
      EXPECT_GE(result.events[i].duration_s, 0.0) << i;
      last_start[thread] = result.events[i].start_s;
    }
  }
}

Plan with(Plan plan, OffloadPlan offload, Recompute recompute = Recompute::kNone) {
  plan.offload = offload;
  plan.recompute = recompute;
  return plan;
}

INSTANTIATE_TEST_SUITE_P(
    OneRank, EngineTrace,
    ::testing::Values(
        make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 0, 4),
        make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 1, 2),
        make_plan(1, 1, 1, 2, ScheduleKind::kInterleaved, 3, 2),
        with(make_plan(1, 1, 1, 1, ScheduleKind::kGpipe, 3, 2),
             {OffloadTier::kCpu, OffloadTier::kCpu, OffloadTier::kCpu}, Recompute::kFull),
        with(make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 2, 4),
             {OffloadTier::kNvme, OffloadTier::kNvme, OffloadTier::kNone}, Recompute::kSelective)));

// The device optimizer's steps (the compute stream's, one after another, each after the norm)
// run as one call, so that the CUDA backend updates every unit in one fused launch: the first
// op's event carries the call's time and every further one names it ("fused_into") with length
// 0. Where the Program puts other ops between them (ZeRO-1: each unit's parameter gather) or
// runs them on the host (optimizer offloaded), each is a call of its own.
struct FusionCase {
  Plan plan;
  bool fused;
};

class EngineOptimizerFusion : public ::testing::TestWithParam<FusionCase> {};

TEST_P(EngineOptimizerFusion, DeviceOptimizerStepsRunAsOneCall) {
  const auto& [plan, fused] = GetParam();
  const ModelSpec model = tiny_model();
  const TrainSpec train = tiny_train();
  const auto corpus = data::generated_corpus(train.seed, 1 << 16);
  auto world = MpiCommunicator::duplicate(MPI_COMM_SELF);
  engine::OffloadOptions options;
  options.nvme_dir = ::testing::TempDir();
  engine::RankTraining rank(model, train, plan, *world, TierBudgets{}, corpus, options);
  const engine::StepResult result = rank.engine().step(0);
  std::vector<const TraceEvent*> steps;
  for (const TraceEvent& e : result.events) {
    if (e.name == "optimizer_step") steps.push_back(&e);
  }
  ASSERT_EQ(steps.size(), rank.engine().program().units.size()) << plan.label();
  EXPECT_FALSE(steps.front()->args.contains("fused_into")) << plan.label();
  for (std::size_t k = 1; k < steps.size(); ++k) {
    const TraceEvent& e = *steps[k];
    EXPECT_EQ(e.args.contains("fused_into"), fused) << plan.label() << " unit " << k;
    if (!fused) continue;
    EXPECT_EQ(e.args["fused_into"], steps.front()->args["op"]) << plan.label() << " unit " << k;
    EXPECT_EQ(e.duration_s, 0.0) << plan.label() << " unit " << k;
    EXPECT_NEAR(e.start_s, steps.front()->start_s + steps.front()->duration_s, 1e-9)
        << plan.label();
  }
}

INSTANTIATE_TEST_SUITE_P(
    OneRank, EngineOptimizerFusion,
    ::testing::Values(
        FusionCase{make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 0, 4), true},
        FusionCase{make_plan(1, 1, 1, 1, ScheduleKind::kGpipe, 3, 2), true},
        FusionCase{make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 1, 2), false},
        FusionCase{with(make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 0, 2),
                        {OffloadTier::kCpu, OffloadTier::kNone, OffloadTier::kNone}),
                   false}));

}  // namespace
}  // namespace strata::testing_support
