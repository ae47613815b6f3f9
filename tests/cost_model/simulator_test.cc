// Tests of the task-graph simulator: makespans worked by hand for small pipelines, the
// closed forms for uniform stages (GPipe/1F1B (m + p - 1)(f + b), interleaved
// (m v + p - 1)(f_c + b_c)), Megatron's bubble fraction, asynchronous sends, transfer
// times, tail tasks, deadlock and mismatch detection, and the time for a large pipeline.
#include "cost_model/simulator.h"

#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cost_model/errors.h"

namespace strata {
namespace {

// Uniform per-chunk times: forward 1, backward 2 (the usual backward = 2 x forward).
constexpr double kF = 1.0;
constexpr double kB = 2.0;

const SimulatedOp& find_op(const SimulationResult& r, std::int64_t rank, OpKind kind,
                           std::int64_t mb, std::int64_t chunk) {
  for (const auto& op : r.timeline[static_cast<std::size_t>(rank)]) {
    if (!op.is_tail && op.op.kind == kind && op.op.micro_batch == mb && op.op.chunk == chunk) {
      return op;
    }
  }
  throw std::runtime_error("op not found");
}

TEST(Simulator, OneFOneBTwoRanksFourMicroBatchesByHand) {
  // p=2, m=4, f=1, b=2, free transfers. Rank 0: F0 F1 B0 F2 B1 F3 B2 B3,
  // rank 1: F0 B0 F1 B1 F2 B2 F3 B3 (see schedule_test). Worked by hand:
  //   r0 F0 [0,1] F1 [1,2];  r1 F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]
  //   r0 B0 [4,6] F2 [6,7];  r1 F2 [7,8] B2 [8,10]
  //   r0 B1 [7,9] F3 [9,10]; r1 F3 [10,11] B3 [11,13]
  //   r0 B2 [10,12] B3 [13,15]
  // makespan 15 = (m + p - 1)(f + b) = 5 * 3.
  const Schedule s = make_schedule(ScheduleKind::kOneFOneB, 2, 1, 4);
  const SimulationResult r = simulate(s, uniform_durations(kF, kB));
  EXPECT_DOUBLE_EQ(r.makespan_s, 15.0);
  EXPECT_DOUBLE_EQ(r.pipeline_s, 15.0);
  EXPECT_DOUBLE_EQ(find_op(r, 0, OpKind::kBackward, 0, 0).start_s, 4.0);
  EXPECT_DOUBLE_EQ(find_op(r, 1, OpKind::kForward, 2, 0).start_s, 7.0);
  EXPECT_DOUBLE_EQ(find_op(r, 0, OpKind::kBackward, 3, 0).start_s, 13.0);
  // Rank 0's receive of B3's gradient is posted when B2 ends (12) and completes when rank 1
  // sends it (13): the wait is visible.
  const auto& recv = find_op(r, 0, OpKind::kRecvBackward, 3, 0);
  EXPECT_DOUBLE_EQ(recv.start_s, 12.0);
  EXPECT_DOUBLE_EQ(recv.end_s, 13.0);
  // Each rank computes m (f + b) = 12; bubble = 15 - 12 = 3; fraction 3/12 = (p-1)/m.
  EXPECT_DOUBLE_EQ(r.busy_s[0], 12.0);
  EXPECT_DOUBLE_EQ(r.busy_s[1], 12.0);
  EXPECT_DOUBLE_EQ(r.bubble_s, 3.0);
  EXPECT_DOUBLE_EQ(r.bubble_fraction, 0.25);
}

TEST(Simulator, InterleavedTwoRanksTwoChunksTwoMicroBatchesByHand) {
  // p=2, v=2, m=2, per-chunk f=1, b=2. Orders (Megatron's, see schedule.cc):
  //   rank 0 (warm-up 4): F(0,c0) F(1,c0) F(0,c1) F(1,c1) B(0,c1) B(1,c1) B(0,c0) B(1,c0)
  //   rank 1 (warm-up 2): F(0,c0) F(1,c0) F(0,c1) B(0,c1) F(1,c1) B(1,c1) B(0,c0) B(1,c0)
  // Stages: r0c0 = s0, r1c0 = s1, r0c1 = s2, r1c1 = s3. By hand:
  //   r0 F(0,0) [0,1] F(1,0) [1,2]; r1 F(0,0) [1,2] F(1,0) [2,3]
  //   r0 F(0,1) [2,3] F(1,1) [3,4]; r1 F(0,1) [3,4] B(0,1) [4,6] F(1,1) [6,7] B(1,1) [7,9]
  //   r0 B(0,1) [6,8] B(1,1) [9,11]; r1 B(0,0) [9,11] B(1,0) [11,13]
  //   r0 B(0,0) [11,13] B(1,0) [13,15]
  // makespan 15 = (m v + p - 1)(f + b) = (4 + 1) * 3; busy 4 * 3 = 12 per rank;
  // bubble fraction 3/12 = (p - 1)/(v m) = 1/4.
  const Schedule s = make_schedule(ScheduleKind::kInterleaved, 2, 2, 2);
  const SimulationResult r = simulate(s, uniform_durations(kF, kB));
  EXPECT_DOUBLE_EQ(r.makespan_s, 15.0);
  EXPECT_DOUBLE_EQ(find_op(r, 1, OpKind::kForward, 1, 1).start_s, 6.0);
  EXPECT_DOUBLE_EQ(find_op(r, 0, OpKind::kBackward, 1, 1).start_s, 9.0);
  EXPECT_DOUBLE_EQ(find_op(r, 1, OpKind::kBackward, 0, 0).start_s, 9.0);
  EXPECT_DOUBLE_EQ(r.busy_s[0], 12.0);
  EXPECT_DOUBLE_EQ(r.bubble_fraction, 0.25);
}

TEST(Simulator, GpipeAndOneFOneBMatchClosedForm) {
  // Uniform stages, free transfers: the first micro-batch needs p - 1 forward slots to
  // reach the last rank and the last backward p - 1 backward slots to drain, so
  // makespan = (m + p - 1)(f + b) and bubble / ideal = (p - 1)(f + b) / (m (f + b)).
  for (const ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB}) {
    for (std::int64_t p : {1, 2, 3, 4, 8}) {
      for (std::int64_t m : {1, 2, 4, 7, 16}) {
        SCOPED_TRACE(fmt::format("{} p={} m={}", kind == ScheduleKind::kGpipe ? "gpipe" : "1f1b", p, m));
        const SimulationResult r = simulate(make_schedule(kind, p, 1, m),
                                            uniform_durations(kF, kB));
        const double expected = static_cast<double>(m + p - 1) * (kF + kB);
        EXPECT_NEAR(r.makespan_s, expected, 1e-9);
        EXPECT_NEAR(r.bubble_fraction, static_cast<double>(p - 1) / static_cast<double>(m),
                    1e-12);
      }
    }
  }
}

TEST(Simulator, InterleavedMatchesClosedForm) {
  // Narayanan et al. 2021 sec. 2.2.2: with v chunks per rank each taking f/v and b/v, the
  // bubble shrinks to (p - 1)(f + b)/v, so with per-chunk times f_c, b_c:
  // makespan = (m v + p - 1)(f_c + b_c) and bubble / ideal = (p - 1)/(v m).
  for (std::int64_t p : {2, 4, 8}) {
    for (std::int64_t v : {2, 3, 4}) {
      for (std::int64_t k : {1, 2, 4}) {
        const std::int64_t m = k * p;
        SCOPED_TRACE(fmt::format("p={} v={} m={}", p, v, m));
        const SimulationResult r = simulate(make_schedule(ScheduleKind::kInterleaved, p, v, m),
                                            uniform_durations(kF, kB));
        EXPECT_NEAR(r.makespan_s, static_cast<double>(m * v + p - 1) * (kF + kB), 1e-9);
        EXPECT_NEAR(r.bubble_fraction,
                    static_cast<double>(p - 1) / static_cast<double>(v * m), 1e-12);
      }
    }
  }
}

TEST(Simulator, SendsAreAsynchronousAndTransfersDelayTheReceiver) {
  // GPipe p=2 m=1, f=1, b=2, transfer t=0.5:
  //   r0 F0 [0,1], SF0 [1,1.5]; r1 RF0 posted at 0, completes at 1.5; F0 [1.5,2.5];
  //   r1 B0 [2.5,4.5], SB0 [4.5,5]; r0 RB0 posted at 1 (right after issuing SF0, not after
  //   it ends), completes at 5; B0 [5,7]. makespan 7 = f + t + f + b + t + b.
  const Schedule s = make_schedule(ScheduleKind::kGpipe, 2, 1, 1);
  const SimulationResult r = simulate(s, uniform_durations(kF, kB, 0.5));
  EXPECT_DOUBLE_EQ(r.makespan_s, 7.0);
  EXPECT_DOUBLE_EQ(find_op(r, 0, OpKind::kRecvBackward, 0, 0).start_s, 1.0);
  EXPECT_DOUBLE_EQ(find_op(r, 0, OpKind::kSendForward, 0, 0).end_s, 1.5);
  EXPECT_DOUBLE_EQ(find_op(r, 1, OpKind::kForward, 0, 0).start_s, 1.5);
  EXPECT_DOUBLE_EQ(find_op(r, 0, OpKind::kBackward, 0, 0).start_s, 5.0);

  // With m=2 the second forward on rank 0 starts right after the first send is issued
  // (t = 1), not when its transfer ends (t = 1.5).
  const SimulationResult r2 =
      simulate(make_schedule(ScheduleKind::kGpipe, 2, 1, 2), uniform_durations(kF, kB, 0.5));
  EXPECT_DOUBLE_EQ(find_op(r2, 0, OpKind::kForward, 1, 0).start_s, 1.0);
}

TEST(Simulator, TailTasksRunAfterThePipeline) {
  // 1F1B p=2 m=4 ends at 15 on rank 0 and at 13 on rank 1 (first test). Tails: rank 0
  // grad sync 2 then optimizer 1 -> ends 18; rank 1 grad sync 2, optimizer 1 -> ends 16.
  // Rank 1's last op is an asynchronous SendBackward issued at 13: its tail starts at 13.
  const Schedule s = make_schedule(ScheduleKind::kOneFOneB, 2, 1, 4);
  const std::vector<std::vector<TailTask>> tails = {
      {{"dp_grad_sync", 2.0}, {"optimizer_step", 1.0}},
      {{"dp_grad_sync", 2.0}, {"optimizer_step", 1.0}}};
  const SimulationResult r = simulate(s, uniform_durations(kF, kB), tails);
  EXPECT_DOUBLE_EQ(r.pipeline_s, 15.0);
  EXPECT_DOUBLE_EQ(r.makespan_s, 18.0);
  ASSERT_EQ(r.timeline[1].back().name, "optimizer_step");
  EXPECT_TRUE(r.timeline[1].back().is_tail);
  EXPECT_DOUBLE_EQ(r.timeline[1][r.timeline[1].size() - 2].start_s, 13.0);
  EXPECT_DOUBLE_EQ(r.timeline[1].back().end_s, 16.0);
  // Tails are not compute: the bubble stays Megatron's (p - 1)/m.
  EXPECT_DOUBLE_EQ(r.bubble_fraction, 0.25);

  EXPECT_THROW(simulate(s, uniform_durations(kF, kB), {{{"x", 1.0}}}), ConfigError);
  EXPECT_THROW(simulate(s, uniform_durations(kF, kB), {{{"x", -1.0}}, {}}), ConfigError);
}

TEST(Simulator, BusiestRankDefinesTheBubble) {
  // 1F1B p=2 m=2 with the last rank's ops twice as slow (its logits): rank 1 computes
  // 2 (2f + 2b) = 12, rank 0 computes 2 (f + b) = 6. By hand:
  //   r0 F0 [0,1] F1 [1,2]; r1 F0 [1,3] B0 [3,7] F1 [7,9] B1 [9,13]
  //   r0 B0 [7,9] B1 [13,15]. pipeline 15, busiest rank 1: bubble 15 - 12 = 3, 3/12.
  const Schedule s = make_schedule(ScheduleKind::kOneFOneB, 2, 1, 2);
  OpDurations d{[](std::int64_t rank, const PipelineOp& op) {
    const double scale = rank == 1 ? 2.0 : 1.0;
    if (op.kind == OpKind::kForward) return scale * kF;
    if (op.kind == OpKind::kBackward) return scale * kB;
    return 0.0;
  }};
  const SimulationResult r = simulate(s, d);
  EXPECT_DOUBLE_EQ(r.makespan_s, 15.0);
  EXPECT_EQ(r.busiest_rank, 1);
  EXPECT_DOUBLE_EQ(r.bubble_s, 3.0);
  EXPECT_DOUBLE_EQ(r.bubble_fraction, 0.25);
}

TEST(Simulator, DetectsDeadlocksAndUnmatchedMessages) {
  // Rank 0 receives the backward gradient before sending its forward output: both ranks
  // block on a receive, which the task graph sees as a cycle.
  Schedule s = make_schedule(ScheduleKind::kOneFOneB, 2, 1, 1);
  std::swap(s.ops[0][1], s.ops[0][2]);  // F0 RB0 SF0 B0
  EXPECT_THROW(simulate(s, uniform_durations(kF, kB)), InfeasiblePlan);

  Schedule missing = make_schedule(ScheduleKind::kOneFOneB, 2, 1, 1);
  missing.ops[1].erase(missing.ops[1].begin());  // drop rank 1's RecvForward
  EXPECT_THROW(simulate(missing, uniform_durations(kF, kB)), InfeasiblePlan);
}

TEST(Simulator, TaskGraphApi) {
  // Three tasks: a (1 s) -> b (2 s) start-after-end, c (0.5 s) start-after-start of a,
  // and c's end floored by b's end: a [0,1], b [1,3], c [0,3].
  TaskGraph g;
  const auto a = g.add_task({0, {}, -1, 1.0});
  const auto b = g.add_task({0, {}, -1, 2.0});
  const auto c = g.add_task({1, {}, -1, 0.5});
  g.add_dependency(a, b, DependencyKind::kStartAfterEnd);
  g.add_dependency(a, c, DependencyKind::kStartAfterStart);
  g.add_dependency(b, c, DependencyKind::kEndAfterEnd);
  EXPECT_EQ(g.num_tasks(), 3u);
  EXPECT_EQ(g.num_dependencies(), 3u);
  const auto t = g.earliest_times();
  EXPECT_DOUBLE_EQ(t[b].start_s, 1.0);
  EXPECT_DOUBLE_EQ(t[b].end_s, 3.0);
  EXPECT_DOUBLE_EQ(t[c].start_s, 0.0);
  EXPECT_DOUBLE_EQ(t[c].end_s, 3.0);
  g.add_dependency(c, a, DependencyKind::kStartAfterEnd);
  EXPECT_THROW(g.earliest_times(), InfeasiblePlan);
}

TEST(Simulator, LargePipelineIsFast) {
  // p=64, v=4, m=512: 64 ranks x (2 m v = 4096 compute + up to 4 m v = 8192 p2p ops)
  // = 784,384 tasks. Still the closed form; about 0.4 s in a Release build on one core
  // (measured), so 10 s only trips on a real regression or a debug build.
  const auto t0 = std::chrono::steady_clock::now();
  const SimulationResult r = simulate(make_schedule(ScheduleKind::kInterleaved, 64, 4, 512),
                                      uniform_durations(kF, kB));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NEAR(r.makespan_s, static_cast<double>(512 * 4 + 63) * (kF + kB), 1e-6);
  EXPECT_LT(seconds, 10.0);
  RecordProperty("large_pipeline_seconds", fmt::format("{:.3f}", seconds));
}

}  // namespace
}  // namespace strata
