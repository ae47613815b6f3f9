// The Program simulator (cost_model/program/program_simulator.h) against timelines worked by hand and
// the closed forms it replaces: GPipe/1F1B (m + p - 1)(f + b) and interleaved
// (m v + p - 1)(f_c + b_c) with Megatron's bubble (p - 1)/(v m); sends asynchronous on
// streams and blocking on one clock; the tail after the whole pipeline (rule 3); a send
// after its pass's reductions (rule 2); overlap that emerges from the streams (a reduction
// hidden but for its last unit, prefetched gathers hidden but for the first); the pass-level
// replay equal to the op-by-op one; the planner's skeleton equal to the Program's; the lower
// bound below every replay; deadlocks detected; a large pipeline replayed fast.
#include "cost_model/program/program_simulator.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cost_model/specs/errors.h"
#include "tests/cost_model/program_test_util.h"

namespace strata {
namespace {

using testing::plan_of;

using Kind = ProgramOpKind;

using testing::train_of;
// A model with `layers` layers; its shape only matters to the Program (which units exist).
ModelSpec model_of(std::int64_t layers) { return testing::small_gpt(layers); }

// Durations chosen by each test: a layer's forward f and backward b (scaled per rank), the
// embedding and head steps free, a transfer, and per layer unit a gather, a reduction, a
// fetch and a gradient offload; every tail op `tail_op` (optimizer steps `optimizer`).
struct TestCosts final : OpCosts {
  double f = 1, b = 2, transfer_s = 0;
  double gather = 0, reduce = 0, fetch = 0, offload = 0;
  double tail_op = 0, optimizer = 0;
  std::function<double(std::int64_t pp_rank)> scale = [](std::int64_t) { return 1.0; };

  static bool is_layer(const RankProgram& rank, std::int32_t unit) {
    return rank.units.at(static_cast<std::size_t>(unit)).kind == UnitKind::kLayer;
  }
  StepTimeParts compute(const RankProgram& rank, Part part, std::int32_t, bool forward) const override {
    StepTimeParts t;
    if (part != Part::kLayer) return t;
    (forward ? t.forward_s : t.backward_s) = (forward ? f : b) * scale(rank.pp_rank);
    return t;
  }
  StepTimeParts state_move(const RankProgram& rank, Kind kind, std::int32_t unit) const override {
    StepTimeParts t;
    if (!is_layer(rank, unit)) return t;
    if (kind == Kind::kGather) t.dp_comm_s = gather;
    if (kind == Kind::kReduceGrads) t.dp_comm_s = reduce;
    if (kind == Kind::kFetch) t.offload_s = fetch;
    if (kind == Kind::kOffloadGrads) t.offload_s = offload;
    return t;
  }
  StepTimeParts transfer(const RankProgram&, Kind, std::int32_t) const override {
    StepTimeParts t;
    t.pp_comm_s = transfer_s;
    return t;
  }
  StepTimeParts tail(const RankProgram&, const ProgramOp& op) const override {
    StepTimeParts t;
    if (op.kind == Kind::kOptimizerStep) {
      t.optimizer_s = optimizer;
    } else {
      t.dp_comm_s = tail_op;
    }
    return t;
  }
};

// The start and end of a step op (a pass or a message) of a rank's timeline.
const TimedOp& find(const Program& program, const ProgramTimeline& t, std::int64_t rank,
                    Kind kind, std::int32_t mb, std::int32_t chunk) {
  const RankProgram& rp = program.ranks.at(static_cast<std::size_t>(rank));
  for (const TimedOp& op : t.ranks.at(static_cast<std::size_t>(rank))) {
    const ProgramOp& p = rp.ops[static_cast<std::size_t>(op.op)];
    if (op.body_op < 0 && p.kind == kind && p.micro_batch == mb && p.chunk == chunk) return op;
  }
  throw std::runtime_error("op not found");
}

// The step time and a lower bound through the planner's path (skeleton from the shape).
double bound_of(const Program& program, const OpCosts& costs, SimulationMode mode) {
  std::vector<PricedRank> ranks;
  std::vector<std::int32_t> class_of;
  for (const RankProgram& r : program.ranks) {
    class_of.push_back(static_cast<std::int32_t>(ranks.size()));
    ranks.push_back(price_rank(r, costs, mode));
  }
  double tail = 0;
  for (const PricedRank& r : ranks) tail = std::max(tail, r.tail_s);
  return pipeline_lower_bound(program.micro_batches, ranks, class_of, mode) + tail;
}

constexpr double kF = 1.0, kB = 2.0;

TEST(ProgramSimulator, OneFOneBTwoRanksFourMicroBatchesByHand) {
  // p = 2, m = 4, one layer a rank, f = 1, b = 2, free transfers. Rank 0: F0 F1 B0 F2 B1 F3
  // B2 B3, rank 1: F0 B0 F1 B1 F2 B2 F3 B3. By hand:
  //   r0 F0 [0,1] F1 [1,2];  r1 F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]
  //   r0 B0 [4,6] F2 [6,7];  r1 F2 [7,8] B2 [8,10]
  //   r0 B1 [7,9] F3 [9,10]; r1 F3 [10,11] B3 [11,13]
  //   r0 B2 [10,12] B3 [13,15]
  // makespan 15 = (m + p - 1)(f + b) = 5 * 3.
  const Program program =
      make_program(model_of(2), train_of(4), plan_of(ScheduleKind::kOneFOneB, 2, 1));
  const TestCosts costs;
  for (SimulationMode mode : {SimulationMode::kStreams, SimulationMode::kSerial}) {
    SCOPED_TRACE(to_string(mode));
    const ProgramTimeline t = simulate_program(program, costs, mode);
    EXPECT_DOUBLE_EQ(t.step.step_s, 15.0);
    EXPECT_DOUBLE_EQ(t.step.pipeline_s, 15.0);
    EXPECT_DOUBLE_EQ(find(program, t, 0, Kind::kBackward, 0, 0).start_s, 4.0);
    EXPECT_DOUBLE_EQ(find(program, t, 1, Kind::kForward, 2, 0).start_s, 7.0);
    EXPECT_DOUBLE_EQ(find(program, t, 0, Kind::kBackward, 3, 0).start_s, 13.0);
    // Rank 0's receive of B3's gradient ends when rank 1 sends it (13). It is issued after
    // B2 (program order), and starts when B2 ends (12): on one clock because everything is
    // in order, on streams because an op off the compute stream waits for the compute issued
    // before it (program.h, rule 1).
    const TimedOp& recv = find(program, t, 0, Kind::kRecvBackward, 3, 0);
    EXPECT_DOUBLE_EQ(recv.start_s, 12.0);
    EXPECT_DOUBLE_EQ(recv.end_s, 13.0);
    // Each rank computes m (f + b) = 12. Free tails: rank 0 is critical (the lowest of
    // equal ends); its idle 15 - 12 = 3 is the bubble, 3/12 = (p - 1)/m of its compute.
    EXPECT_DOUBLE_EQ(t.step.busy_s[0], 12.0);
    EXPECT_DOUBLE_EQ(t.step.busy_s[1], 12.0);
    EXPECT_EQ(t.step.critical_rank, 0);
    EXPECT_DOUBLE_EQ(t.step.parts.forward_s, 4.0);
    EXPECT_DOUBLE_EQ(t.step.parts.backward_s, 8.0);
    EXPECT_DOUBLE_EQ(t.step.parts.bubble_s, 3.0);
    EXPECT_DOUBLE_EQ(t.step.parts.sum(), 15.0);
    // The bound is exact for uniform stages and free transfers, less the relative 1e-12 it
    // gives up so that rounding never lifts it above the replay.
    EXPECT_DOUBLE_EQ(bound_of(program, costs, mode), 15.0 * (1.0 - 1e-12));
    EXPECT_LE(bound_of(program, costs, mode), 15.0);
  }
}

TEST(ProgramSimulator, InterleavedTwoRanksTwoChunksTwoMicroBatchesByHand) {
  // p = 2, v = 2, m = 2, one layer a chunk (f = 1, b = 2). Orders (Megatron's, schedule.cc):
  //   rank 0: F(0,c0) F(1,c0) F(0,c1) F(1,c1) B(0,c1) B(1,c1) B(0,c0) B(1,c0)
  //   rank 1: F(0,c0) F(1,c0) F(0,c1) B(0,c1) F(1,c1) B(1,c1) B(0,c0) B(1,c0)
  // By hand:
  //   r0 F(0,0) [0,1] F(1,0) [1,2]; r1 F(0,0) [1,2] F(1,0) [2,3]
  //   r0 F(0,1) [2,3] F(1,1) [3,4]; r1 F(0,1) [3,4] B(0,1) [4,6] F(1,1) [6,7] B(1,1) [7,9]
  //   r0 B(0,1) [6,8] B(1,1) [9,11]; r1 B(0,0) [9,11] B(1,0) [11,13]
  //   r0 B(0,0) [11,13] B(1,0) [13,15]
  // makespan 15 = (m v + p - 1)(f + b); bubble 3 of 12 = (p - 1)/(v m).
  const Program program =
      make_program(model_of(4), train_of(2), plan_of(ScheduleKind::kInterleaved, 2, 2));
  const ProgramTimeline t = simulate_program(program, TestCosts{}, SimulationMode::kStreams);
  EXPECT_DOUBLE_EQ(t.step.step_s, 15.0);
  EXPECT_DOUBLE_EQ(find(program, t, 1, Kind::kForward, 1, 1).start_s, 6.0);
  EXPECT_DOUBLE_EQ(find(program, t, 0, Kind::kBackward, 1, 1).start_s, 9.0);
  EXPECT_DOUBLE_EQ(find(program, t, 1, Kind::kBackward, 0, 0).start_s, 9.0);
  EXPECT_DOUBLE_EQ(t.step.busy_s[0], 12.0);
  EXPECT_DOUBLE_EQ(t.step.parts.bubble_s, 3.0);
}

TEST(ProgramSimulator, GpipeAndOneFOneBMatchTheClosedForm) {
  // Uniform stages, free transfers: the first micro-batch needs p - 1 forward slots to reach
  // the last rank and the last backward p - 1 backward slots to drain, so the step is
  // (m + p - 1)(f + b) and the critical rank idles (p - 1)(f + b): (p - 1)/m of its compute.
  for (const ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB}) {
    for (std::int64_t p : {1, 2, 3, 4, 8}) {
      for (std::int64_t m : {1, 2, 4, 7, 16}) {
        SCOPED_TRACE(fmt::format("{} p={} m={}", to_string(kind), p, m));
        const Program program = make_program(model_of(p), train_of(m), plan_of(kind, p, 1));
        for (SimulationMode mode : {SimulationMode::kStreams, SimulationMode::kSerial}) {
          const StepSimulation s = simulate_program(program, TestCosts{}, mode).step;
          const double expected = static_cast<double>(m + p - 1) * (kF + kB);
          EXPECT_NEAR(s.step_s, expected, 1e-9);
          EXPECT_NEAR(s.parts.bubble_s / s.busy_s[0], static_cast<double>(p - 1) / static_cast<double>(m),
                      1e-12);
          EXPECT_NEAR(bound_of(program, TestCosts{}, mode), expected, 1e-9);
        }
      }
    }
  }
}

TEST(ProgramSimulator, InterleavedMatchesTheClosedForm) {
  // Narayanan et al. 2021 sec. 2.2.2: v chunks per rank of f_c, b_c each shrink the bubble to
  // (p - 1)(f_c + b_c): a step of (m v + p - 1)(f_c + b_c), the bubble (p - 1)/(v m) of the
  // compute. (The bound is looser here: it fills and drains through chunk 0 only.)
  for (std::int64_t p : {2, 4, 8}) {
    for (std::int64_t v : {2, 3, 4}) {
      for (std::int64_t k : {1, 2, 4}) {
        const std::int64_t m = k * p;
        SCOPED_TRACE(fmt::format("p={} v={} m={}", p, v, m));
        const Program program = make_program(model_of(p * v), train_of(m),
                                             plan_of(ScheduleKind::kInterleaved, p, v));
        const StepSimulation s = simulate_program(program, TestCosts{}, SimulationMode::kStreams).step;
        EXPECT_NEAR(s.step_s, static_cast<double>(m * v + p - 1) * (kF + kB), 1e-9);
        EXPECT_NEAR(s.parts.bubble_s / s.busy_s[0],
                    static_cast<double>(p - 1) / static_cast<double>(v * m), 1e-12);
        EXPECT_LE(bound_of(program, TestCosts{}, SimulationMode::kStreams), s.step_s);
      }
    }
  }
}

TEST(ProgramSimulator, SendsAreAsynchronousOnStreamsAndBlockOnOneClock) {
  // GPipe p = 2, m = 1, f = 1, b = 2, transfer 0.5:
  //   r0 F0 [0,1], send [1,1.5]; r1 receive [0,1.5], F0 [1.5,2.5], B0 [2.5,4.5], send
  //   [4.5,5]; r0 receive [1.5,5] (after its send on the p2p stream), B0 [5,7]. Step 7 =
  //   f + t + f + b + t + b, both modes.
  TestCosts costs;
  costs.transfer_s = 0.5;
  const Program one = make_program(model_of(2), train_of(1), plan_of(ScheduleKind::kGpipe, 2, 1));
  const ProgramTimeline streams = simulate_program(one, costs, SimulationMode::kStreams);
  EXPECT_DOUBLE_EQ(streams.step.step_s, 7.0);
  EXPECT_DOUBLE_EQ(find(one, streams, 0, Kind::kSendForward, 0, 0).end_s, 1.5);
  EXPECT_DOUBLE_EQ(find(one, streams, 1, Kind::kForward, 0, 0).start_s, 1.5);
  EXPECT_DOUBLE_EQ(find(one, streams, 0, Kind::kBackward, 0, 0).start_s, 5.0);
  // The critical rank 0 computes 3 of the 7: the transfers of its two messages are pp_comm
  // (0.5 + 0.5: sending its activation, receiving the gradient), the rest of its waits bubble.
  EXPECT_DOUBLE_EQ(streams.step.parts.pp_comm_s, 1.0);
  EXPECT_DOUBLE_EQ(streams.step.parts.bubble_s, 3.0);
  EXPECT_DOUBLE_EQ(simulate_program(one, costs, SimulationMode::kSerial).step.step_s, 7.0);

  // m = 2: on streams rank 0's second forward starts when the first ends (1), its send on
  // the p2p stream; on one clock it waits for the send (1.5).
  const Program two = make_program(model_of(2), train_of(2), plan_of(ScheduleKind::kGpipe, 2, 1));
  EXPECT_DOUBLE_EQ(
      find(two, simulate_program(two, costs, SimulationMode::kStreams), 0, Kind::kForward, 1, 0).start_s,
      1.0);
  EXPECT_DOUBLE_EQ(
      find(two, simulate_program(two, costs, SimulationMode::kSerial), 0, Kind::kForward, 1, 0).start_s,
      1.5);
}

TEST(ProgramSimulator, TheTailStartsAfterTheWholePipeline) {
  // 1F1B p = 2, m = 4 (the first test): rank 1's passes end at 13, rank 0's at 15. Each
  // optimizer step costs 1: rank 0 updates the embedding and layer0 (2), rank 1 layer1, the
  // tied copy and the final norm (3), one after the other on the compute stream. Both tails
  // start at 15 (rule 3), so the step is 15 + 3 = 18 and rank 1 is critical: compute 12,
  // optimizer 3, idle [0,1] and [13,15] = 3 of bubble.
  TestCosts costs;
  costs.optimizer = 1;
  const Program program =
      make_program(model_of(2), train_of(4), plan_of(ScheduleKind::kOneFOneB, 2, 1));
  const ProgramTimeline t = simulate_program(program, costs, SimulationMode::kStreams);
  EXPECT_DOUBLE_EQ(t.step.pipeline_s, 15.0);
  EXPECT_DOUBLE_EQ(t.step.step_s, 18.0);
  EXPECT_EQ(t.step.critical_rank, 1);
  EXPECT_DOUBLE_EQ(t.step.tail_s[0], 2.0);
  EXPECT_DOUBLE_EQ(t.step.tail_s[1], 3.0);
  EXPECT_DOUBLE_EQ(t.ranks[1].back().end_s, 18.0);
  EXPECT_DOUBLE_EQ(t.step.parts.optimizer_s, 3.0);
  EXPECT_DOUBLE_EQ(t.step.parts.bubble_s, 3.0);
  EXPECT_DOUBLE_EQ(t.step.parts.sum(), 18.0);
}

TEST(ProgramSimulator, ASendWaitsForItsPassesComputeNotItsReductions) {
  // Rule 2. 1F1B p = 2, d = 2, ZeRO 0, m = 1: the only backward reduces (0.5 a layer).
  // Rank 1: F [1,2], B [2,4], its layer reduced [4,4.5] on the comm stream. The send of the
  // input gradient waits only for the backward's compute (4), so rank 0's backward runs
  // [4,6] and its reduction [6,6.5]; on one clock the send comes after the reduction (4.5)
  // and rank 0's backward and reduction end at 4.5 + 2 + 0.5 = 7.
  TestCosts costs;
  costs.reduce = 0.5;
  const Program program =
      make_program(model_of(2), train_of(2), plan_of(ScheduleKind::kOneFOneB, 2, 1, 2));
  const ProgramTimeline t = simulate_program(program, costs, SimulationMode::kStreams);
  EXPECT_DOUBLE_EQ(find(program, t, 1, Kind::kSendBackward, 0, 0).start_s, 4.0);
  EXPECT_DOUBLE_EQ(find(program, t, 0, Kind::kBackward, 0, 0).start_s, 4.0);
  EXPECT_DOUBLE_EQ(t.step.pipeline_s, 6.5);
  const ProgramTimeline serial = simulate_program(program, costs, SimulationMode::kSerial);
  EXPECT_DOUBLE_EQ(find(program, serial, 1, Kind::kSendBackward, 0, 0).start_s, 4.5);
  EXPECT_DOUBLE_EQ(serial.step.pipeline_s, 7.0);
}

TEST(ProgramSimulator, AReductionThatFitsUnderTheBackwardIsHiddenButForItsLastUnit) {
  // p = 1, d = 2, ZeRO 0, 4 layers, m = 2 (F0 [0,4] B0 [4,12] F1 [12,16] B1 [16,24]); the
  // last backward reduces each layer right after its gradient, on the comm stream.
  //   r = 1.5 < b: each reduction runs under the next layer's backward, the last (layer0's)
  //     after the pass: the pipeline ends at 24 + 1.5.
  //   r = 3 > b: they queue; the last ends b + 4 r after the pass starts (16 + 2 + 12 = 30):
  //     exposed 4 r - (4 - 1) b - b + b = 6 = b + L r - L b.
  const Program program =
      make_program(model_of(4), train_of(4), plan_of(ScheduleKind::kOneFOneB, 1, 1, 2));
  for (const auto& [r, end] : {std::pair{1.5, 25.5}, {3.0, 30.0}}) {
    TestCosts costs;
    costs.reduce = r;
    const StepSimulation s = simulate_program(program, costs, SimulationMode::kStreams).step;
    EXPECT_DOUBLE_EQ(s.pipeline_s, end) << "r = " << r;
    EXPECT_DOUBLE_EQ(s.parts.dp_comm_s, end - 24.0) << "r = " << r;
    // On one clock (the CPU backend) every reduction is exposed: 24 + 4 r.
    EXPECT_DOUBLE_EQ(simulate_program(program, costs, SimulationMode::kSerial).step.pipeline_s,
                     24.0 + 4 * r);
  }
}

TEST(ProgramSimulator, PrefetchedGathersHideBehindComputeButTheFirst) {
  // p = 1, d = 2, ZeRO 3, 4 layers, m = 1, forward f = 1. The forward body gathers each
  // layer one compute step ahead in list order: layer k + 1's gather is issued before layer
  // k computes, so it waits for the comm stream and for layer k - 1's compute (program.h,
  // rule 1). Layer k computes from max(the previous compute's end, its gather's end):
  //   g = 0.5 < f: only the first gather is exposed, the forward takes g + 4 f = 4.5;
  //   g = 2 > f:   the gathers pace it, 4 g + f = 9.
  // On one clock the forward is 4 (g + f): 6 and 12.
  const Program program =
      make_program(model_of(4), train_of(2), plan_of(ScheduleKind::kOneFOneB, 1, 1, 2, 3));
  for (const auto& [g, streams, serial] : {std::tuple{0.5, 4.5, 6.0}, {2.0, 9.0, 12.0}}) {
    TestCosts costs;
    costs.gather = g;
    const ProgramTimeline t = simulate_program(program, costs, SimulationMode::kStreams);
    const TimedOp& forward = find(program, t, 0, Kind::kForward, 0, 0);
    EXPECT_DOUBLE_EQ(forward.end_s - forward.start_s, streams) << "g = " << g;
    const ProgramTimeline one = simulate_program(program, costs, SimulationMode::kSerial);
    const TimedOp& serial_forward = find(program, one, 0, Kind::kForward, 0, 0);
    EXPECT_DOUBLE_EQ(serial_forward.end_s - serial_forward.start_s, serial) << "g = " << g;
  }
}

TEST(ProgramSimulator, PublishedBackwardExposesTheRegatherAndThePreviousReduction) {
  // p = 1, d = 2, ZeRO 3, full recomputation, the published regathers, 4 layers, m = 1; a
  // layer's backward (its recomputation included) b, every gather and reduce-scatter g (the
  // same bytes). Backward step k issues the regather R(k) (after the prefetched G(k)), the
  // prefetch G(k-1), the compute, then the reduce-scatter RS(k), all on the comm stream,
  // every comm op after the compute issued before it (rule 1). From the pass start: G3
  // [0, g] (prefetched in the head's step), then per layer, t the end of the previous
  // layer's compute: RS(k+1) and R(k) before the compute, G(k-1) beside it:
  //   b > g: the cycle is b + 2g; layer 3 starts at 2g, layer 0 ends at 2g + 4b + 3 (2g)
  //          = 8g + 4b, its reduce-scatter ends g later: 9g + 4b. (b = 3, g = 1: 20, 21.)
  //   b < g: the link paces it, 3g a layer (R, G, RS back to back); layer 3 starts at 2g,
  //          layer 0 at 2g + 3 (3g) = 11g, ends at 11g + b, its reduce-scatter g later.
  //          (b = 1, g = 2: 23, 25.)
  // With the prefetch issued before the regather the compute would wait for three
  // transfers, b + 3g a layer but the last (nothing left to prefetch): 23 at b = 3, g = 1.
  Plan plan = plan_of(ScheduleKind::kOneFOneB, 1, 1, 2, 3);
  plan.recompute = Recompute::kFull;
  ProgramOptions published;
  published.recompute_regathers = true;
  const Program program = make_program(model_of(4), train_of(2), plan, published);
  for (const auto& [b, g, compute_end, end] : {std::tuple{3.0, 1.0, 20.0, 21.0}, {1.0, 2.0, 23.0, 25.0}}) {
    TestCosts costs;
    costs.b = b;
    costs.gather = g;
    costs.reduce = g;
    const ProgramTimeline t = simulate_program(program, costs, SimulationMode::kStreams);
    const TimedOp& backward = find(program, t, 0, Kind::kBackward, 0, 0);
    EXPECT_DOUBLE_EQ(backward.end_s - backward.start_s, compute_end) << "b = " << b;
    EXPECT_DOUBLE_EQ(t.step.pipeline_s - backward.start_s, end) << "b = " << b;
  }
}

TEST(ProgramSimulator, PassReplayEqualsTheOpByOneReplay) {
  // A pass's max-plus response gives the times its ops give one by one, for bodies with every
  // kind of state move (ZeRO-3 with parameters and gradients offloaded, sequence parallel,
  // the published regathers) and random durations and inputs.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.0, 3.0);
  ModelSpec model = model_of(6);
  Plan plan = plan_of(ScheduleKind::kOneFOneB, 2, 1, 2, 3);
  plan.tp = 2;
  plan.sequence_parallel = true;
  plan.offload = {OffloadTier::kCpu, OffloadTier::kCpu, OffloadTier::kNvme};
  plan.recompute = Recompute::kFull;
  int host_ops = 0;
  for (bool regathers : {false, true}) {
    ProgramOptions options;
    options.recompute_regathers = regathers;
    options.prefetch_distance = 3;
    options.host_optimizer_in_backward = true;  // the layers' host steps in the bodies too
    const Program program = make_program(model, train_of(8), plan, options);
    // Random costs per (kind, unit).
    struct RandomCosts final : OpCosts {
      std::vector<double> table;
      double at(std::size_t i) const { return table[i % table.size()]; }
      StepTimeParts compute(const RankProgram&, Part part, std::int32_t unit, bool forward) const override {
        StepTimeParts t;
        t.forward_s = at(static_cast<std::size_t>(unit) * 7 + static_cast<std::size_t>(part) * 3 + (forward ? 1 : 0));
        return t;
      }
      StepTimeParts state_move(const RankProgram&, Kind kind, std::int32_t unit) const override {
        StepTimeParts t;
        t.dp_comm_s = at(static_cast<std::size_t>(unit) * 11 + static_cast<std::size_t>(kind) * 5);
        return t;
      }
      StepTimeParts transfer(const RankProgram&, Kind, std::int32_t) const override { return {}; }
      StepTimeParts tail(const RankProgram&, const ProgramOp&) const override { return {}; }
    } costs;
    for (int i = 0; i < 97; ++i) costs.table.push_back(u(rng));
    for (const RankProgram& rank : program.ranks) {
      const PricedRank priced = price_rank(rank, costs, SimulationMode::kStreams);
      for (const PricedBody& body : priced.bodies) {
        for (int trial = 0; trial < 20; ++trial) {
          const double s = u(rng), comm = u(rng), copy = u(rng);
          std::vector<std::array<double, 2>> times;
          expand_body(body, SimulationMode::kStreams, s, comm, copy, times);
          double compute_end = s, comm_free = comm, copy_free = copy, all = s;
          for (std::size_t k = 0; k < times.size(); ++k) {
            // The host optimizer of a layer (optimizer on the CPU, no clipping) holds the
            // compute lane: the CUDA backend runs it on the issuing thread (body_stream).
            const Stream st = body_stream(body.body->ops[k]);
            if (body.body->ops[k].stream == Stream::kHost) ++host_ops;
            if (st == Stream::kCompute) compute_end = times[k][1];
            if (st == Stream::kComm) comm_free = times[k][1];
            if (st == Stream::kCopy) copy_free = times[k][1];
            all = std::max(all, times[k][1]);
            EXPECT_GE(times[k][0], s);
          }
          const auto out = [&](int k) {
            const auto& g = body.response.gain[static_cast<std::size_t>(k)];
            return std::max({s + g[0], comm + g[1], copy + g[2]});
          };
          EXPECT_NEAR(out(BodyResponse::kComputeEnd), compute_end, 1e-12);
          EXPECT_NEAR(out(BodyResponse::kCommFree), comm_free, 1e-12);
          EXPECT_NEAR(out(BodyResponse::kCopyFree), copy_free, 1e-12);
          EXPECT_NEAR(out(BodyResponse::kAllEnd), all, 1e-12);
        }
      }
    }
  }
  EXPECT_GT(host_ops, 0);  // the layers' host optimizer steps were among the bodies' ops
}

TEST(ProgramSimulator, ZeroThreeCommOpsBecomeReadyInListOrderWithoutSequenceParallelOrFetches) {
  // program.h ("Streams and order"): one comm stream prices DeepSpeed's reductions on a
  // stream of their own sharing the link with the gathers, a link that serves ready ops one
  // by one (ties in issue order), because the comm ops become ready in list order. Ready, on
  // two streams (the reductions with the LayerNorm sums that precede them, whose sums they
  // reduce, on one; the gathers on the other): after the pass start,
  // the compute issued before (rule 1), the ops it names and the op before it on its own
  // stream. If that is non-decreasing in list order, the link serves them in list order and
  // each starts at max(ready, the previous op's end): the one stream's times (by induction
  // over the ops). Checked for every body of ZeRO-3 Programs with the published regathers,
  // gradients offloaded or not, random durations. Two things break the order, and there the
  // one stream is not DeepSpeed's two: with sequence parallelism a reduction waits for its
  // norm sum, and a gather ready meanwhile would go first; with offloaded parameters a
  // gather waits for its fetch, and a slow one would let the reduction after it go first.
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.0, 3.0);
  struct RandomCosts final : OpCosts {
    std::vector<double> table;
    double at(std::size_t i) const { return table[i % table.size()]; }
    StepTimeParts compute(const RankProgram&, Part part, std::int32_t unit, bool forward) const override {
      StepTimeParts t;
      t.forward_s = at(static_cast<std::size_t>(unit) * 7 + static_cast<std::size_t>(part) * 3 + (forward ? 1 : 0));
      return t;
    }
    StepTimeParts state_move(const RankProgram&, Kind kind, std::int32_t unit) const override {
      StepTimeParts t;
      t.dp_comm_s = at(static_cast<std::size_t>(unit) * 11 + static_cast<std::size_t>(kind) * 5);
      return t;
    }
    StepTimeParts transfer(const RankProgram&, Kind, std::int32_t) const override { return {}; }
    StepTimeParts tail(const RankProgram&, const ProgramOp&) const override { return {}; }
  };
  // Whether every comm op of `body`, expanded from a pass start on free streams, is ready no
  // earlier than the comm op before it.
  const auto in_order = [](const PricedBody& body, double s) {
    std::vector<std::array<double, 2>> times;
    expand_body(body, SimulationMode::kStreams, s, s, s, times);
    const auto& ops = body.body->ops;
    double compute_end = s, last_ready = s;
    std::array<double, 2> stream_end{s, s};  // [0 gathers, 1 norm sums and reductions]
    for (std::size_t k = 0; k < ops.size(); ++k) {
      if (ops[k].stream == Stream::kCompute) compute_end = times[k][1];
      if (ops[k].stream != Stream::kComm) continue;
      const std::size_t own = ops[k].kind == Kind::kGather ? 0 : 1;
      double ready = std::max(compute_end, stream_end[own]);
      for (std::int32_t a : ops[k].after) {
        if (a >= 0) ready = std::max(ready, times[static_cast<std::size_t>(a)][1]);
      }
      if (ready < last_ready) return false;
      last_ready = ready;
      stream_end[own] = times[k][1];
    }
    return true;
  };
  ProgramOptions published;
  published.recompute_regathers = true;
  bool broken_by_sums = false, broken_by_fetches = false;
  for (const bool sp : {false, true}) {
    for (const OffloadTier grads : {OffloadTier::kNone, OffloadTier::kCpu}) {
      for (const OffloadTier params : {OffloadTier::kNone, OffloadTier::kCpu}) {
        Plan plan = plan_of(ScheduleKind::kOneFOneB, 2, 1, 2, 3);
        plan.tp = 2;
        plan.sequence_parallel = sp;
        plan.offload = {OffloadTier::kNone, grads, params};
        plan.recompute = Recompute::kFull;
        const Program program = make_program(model_of(6), train_of(8), plan, published);
        for (int trial = 0; trial < 30; ++trial) {
          RandomCosts costs;
          for (int i = 0; i < 97; ++i) costs.table.push_back(u(rng));
          for (const RankProgram& rank : program.ranks) {
            const PricedRank priced = price_rank(rank, costs, SimulationMode::kStreams);
            for (const PricedBody& body : priced.bodies) {
              const bool ordered = in_order(body, u(rng));
              if (!sp && params == OffloadTier::kNone) {
                EXPECT_TRUE(ordered) << plan.label();
              } else if (params == OffloadTier::kNone) {
                broken_by_sums = broken_by_sums || !ordered;
              } else if (!sp) {
                broken_by_fetches = broken_by_fetches || !ordered;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_TRUE(broken_by_sums);
  EXPECT_TRUE(broken_by_fetches);
}

TEST(ProgramSimulator, SkeletonOfTheShapeIsTheProgramsAndFillsAndDrains) {
  // The planner replays skeletons built from make_schedule; they must be the Program's step
  // ops exactly, and every rank must run m forwards, m - 1 plain backwards and the last
  // micro-batch's backward per chunk, starting with (0, chunk 0) and ending with
  // (m - 1, chunk 0): what pipeline_lower_bound assumes.
  for (auto [kind, p, v, m] :
       {std::tuple{ScheduleKind::kGpipe, 1, 1, 3}, {ScheduleKind::kGpipe, 3, 1, 5},
        {ScheduleKind::kOneFOneB, 1, 1, 1}, {ScheduleKind::kOneFOneB, 4, 1, 2},
        {ScheduleKind::kOneFOneB, 4, 1, 9}, {ScheduleKind::kInterleaved, 2, 2, 2},
        {ScheduleKind::kInterleaved, 4, 2, 8}, {ScheduleKind::kInterleaved, 3, 4, 6}}) {
    SCOPED_TRACE(fmt::format("{} p={} v={} m={}", to_string(kind), p, v, m));
    const Program program = make_program(model_of(p * v * 2), train_of(m), plan_of(kind, p, v));
    const PipelineSkeleton skeleton = pipeline_skeleton(kind, p, v, m);
    EXPECT_TRUE(pipeline_skeleton(program) == skeleton);
    EXPECT_TRUE(skeleton.fills_and_drains);
    for (const auto& rank : skeleton.passes) {
      for (const auto& chunk : rank) {
        EXPECT_EQ(chunk[0], m);
        EXPECT_EQ(chunk[1], m - 1);
        EXPECT_EQ(chunk[2], 1);
      }
    }
  }
}

TEST(ProgramSimulator, TheBoundIsBelowEveryReplay) {
  // Random per-rank compute, transfers, reductions and offloads over pipelines of every
  // kind: the planner may skip a replay only if the bound never exceeds it.
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.1, 2.0);
  for (auto [kind, p, v, m] :
       {std::tuple{ScheduleKind::kGpipe, 3, 1, 4}, {ScheduleKind::kOneFOneB, 4, 1, 6},
        {ScheduleKind::kOneFOneB, 5, 1, 3}, {ScheduleKind::kInterleaved, 2, 3, 4},
        {ScheduleKind::kInterleaved, 4, 2, 8}}) {
    for (int trial = 0; trial < 10; ++trial) {
      Plan plan = plan_of(kind, p, v, 2, 2);
      plan.offload.gradients = OffloadTier::kCpu;
      plan.offload.optimizer = OffloadTier::kCpu;
      const Program program = make_program(model_of(p * v), train_of(2 * m), plan);
      TestCosts costs;
      costs.transfer_s = u(rng) / 4;
      costs.reduce = u(rng);
      costs.offload = u(rng);
      std::vector<double> scale;
      for (std::int64_t r = 0; r < p; ++r) scale.push_back(u(rng));
      costs.scale = [scale](std::int64_t r) { return scale[static_cast<std::size_t>(r)]; };
      for (SimulationMode mode : {SimulationMode::kStreams, SimulationMode::kSerial}) {
        const double step = simulate_program(program, costs, mode).step.step_s;
        EXPECT_LE(bound_of(program, costs, mode), step * (1 + 1e-12))
            << to_string(kind) << " p=" << p << " trial " << trial;
      }
    }
  }
}

TEST(ProgramSimulator, PartsAddUpToTheStepOnTheCriticalRank) {
  // Everything priced, random: the parts of the critical rank cover its whole step.
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0.1, 2.0);
  Plan plan = plan_of(ScheduleKind::kInterleaved, 2, 2, 2, 3);
  plan.offload = {OffloadTier::kCpu, OffloadTier::kCpu, OffloadTier::kCpu};
  const Program program = make_program(model_of(8), train_of(8), plan);
  for (int trial = 0; trial < 10; ++trial) {
    TestCosts costs;
    costs.f = u(rng);
    costs.b = u(rng);
    costs.transfer_s = u(rng) / 4;
    costs.gather = u(rng);
    costs.reduce = u(rng);
    costs.fetch = u(rng);
    costs.offload = u(rng);
    costs.tail_op = u(rng);
    costs.optimizer = u(rng);
    for (SimulationMode mode : {SimulationMode::kStreams, SimulationMode::kSerial}) {
      const StepSimulation s = simulate_program(program, costs, mode).step;
      EXPECT_NEAR(s.parts.sum(), s.step_s, 1e-9 * s.step_s);
      EXPECT_GE(s.parts.bubble_s, 0.0);
      EXPECT_LE(s.busy_s[static_cast<std::size_t>(s.critical_rank)], s.pipeline_s);
    }
  }
}

TEST(ProgramSimulator, DetectsDeadlocksAndUnmatchedMessages) {
  // Rank 0 receives the backward gradient before it sends its forward output: both ranks wait
  // on a receive.
  Program program =
      make_program(model_of(2), train_of(1), plan_of(ScheduleKind::kOneFOneB, 2, 1));
  auto& ops = program.ranks[0].ops;  // F0 SF0 RB0 B0
  ASSERT_EQ(ops[1].kind, Kind::kSendForward);
  std::swap(ops[1], ops[2]);
  ops[2].after = {0, -1, -1};  // the send still names the forward
  EXPECT_THROW(pipeline_skeleton(program), InfeasiblePlan);

  Program missing =
      make_program(model_of(2), train_of(1), plan_of(ScheduleKind::kOneFOneB, 2, 1));
  auto& rank1 = missing.ranks[1];
  rank1.ops.erase(rank1.ops.begin());  // drop rank 1's receive of its input
  --rank1.tail_begin;
  for (ProgramOp& op : rank1.ops) {
    for (auto& a : op.after) a = a > 0 ? a - 1 : -1;
  }
  EXPECT_THROW(pipeline_skeleton(missing), InfeasiblePlan);
}

TEST(ProgramSimulator, LargePipelineIsFast) {
  // p = 64, v = 4, m = 512 (the planner's path: the shape's skeleton and the three distinct
  // ranks): per rank 2 m v = 4096 passes and 4 m v messages, but for the ends of the
  // pipeline (no receive into virtual stage 0 nor send out of it, the same at the last one):
  // 64 x 12,288 - 4 m = 784,384 ops replayed pass by pass. The
  // closed form (m v + p - 1)(f + b); a few tens of ms in Release, so 10 s only trips on a
  // real regression or a debug build.
  const std::int64_t p = 64, v = 4, m = 512;
  const auto t0 = std::chrono::steady_clock::now();
  const PipelineSkeleton skeleton = pipeline_skeleton(ScheduleKind::kInterleaved, p, v, m);
  // The distinct ranks of a 3-rank pipeline with the same chunks stand for ranks 0, 1..62, 63.
  const Program small = make_program(model_of(3 * v), train_of(3),
                                     plan_of(ScheduleKind::kInterleaved, 3, v));
  std::vector<PricedRank> ranks;
  for (const RankProgram& r : small.ranks) ranks.push_back(price_rank(r, TestCosts{}, SimulationMode::kStreams));
  std::vector<std::int32_t> class_of(static_cast<std::size_t>(p), 1);
  class_of.front() = 0;
  class_of.back() = 2;
  ReplayScratch scratch;
  const double end = replay_pipeline(skeleton, ranks, class_of, SimulationMode::kStreams, scratch);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NEAR(end, static_cast<double>(m * v + p - 1) * (kF + kB), 1e-6);
  EXPECT_EQ(skeleton.order.size(), 784384u);
  EXPECT_LT(seconds, 10.0);
  RecordProperty("large_pipeline_seconds", fmt::format("{:.3f}", seconds));
}

}  // namespace
}  // namespace strata
