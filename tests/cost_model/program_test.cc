// The Program generator (cost_model/program/program.h): the pipeline part is make_schedule's order
// op for op, and every state move the engine used to decide on its own is where program.h
// says: gathers one compute step ahead and released after use, fetches `prefetch_distance`
// steps ahead, each unit reduced once per step right after its last gradient (or after every
// micro-batch with offloaded gradients), the tail in its fixed order.
#include "cost_model/program/program.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "cost_model/specs/errors.h"
#include "cost_model/program/rank_pipeline_ops.h"
#include "cost_model/program/rank_program_cache.h"
#include "tests/cost_model/program_test_util.h"

namespace strata {
namespace {

using testing::train_of;
ModelSpec tiny_model() { return testing::small_gpt(8); }

Plan program_plan(std::int64_t t, std::int64_t p, std::int64_t d, std::int64_t v, ScheduleKind kind,
             int zero, std::int64_t b = 1) {
  Plan plan;
  plan.tp = t;
  plan.pp = p;
  plan.dp = d;
  plan.virtual_stages = v;
  plan.schedule = kind;
  plan.zero_stage = zero;
  plan.micro_batch = b;
  return plan;
}

// A rank's step with every pass's body ops inlined: what a CPU rank executes, in order.
struct Flat {
  ProgramOpKind kind;
  std::int32_t micro_batch;  // of the enclosing pass (-1 in the tail)
  std::int32_t chunk;
  std::string unit;
  Part part;
  bool forward_pass;
};
std::vector<Flat> flatten(const RankProgram& rank) {
  std::vector<Flat> out;
  for (std::size_t i = 0; i < rank.ops.size(); ++i) {
    const ProgramOp& op = rank.ops[i];
    const auto name = [&](std::int32_t u) { return u >= 0 ? rank.units[static_cast<std::size_t>(u)].name : ""; };
    if (!op.is_pass()) {
      out.push_back({op.kind, op.micro_batch, op.chunk, name(op.unit), op.part, false});
      continue;
    }
    const PassBody& body = rank.bodies[static_cast<std::size_t>(op.body)];
    EXPECT_EQ(body.forward, op.kind == ProgramOpKind::kForward);
    EXPECT_EQ(body.chunk, op.chunk);
    for (const ProgramOp& b : body.ops) {
      out.push_back({b.kind, op.micro_batch, op.chunk, name(b.unit), b.part, body.forward});
    }
  }
  return out;
}

int count(const std::vector<Flat>& flat, ProgramOpKind kind, const std::string& unit) {
  int n = 0;
  for (const Flat& f : flat) n += f.kind == kind && f.unit == unit ? 1 : 0;
  return n;
}

TEST(Program, PipelineOpsAreTheScheduleOpForOp) {
  const ModelSpec model = tiny_model();
  const TrainSpec train = train_of(8);
  for (auto [p, v, kind] : {std::tuple{1, 1, ScheduleKind::kOneFOneB}, {2, 1, ScheduleKind::kGpipe},
                            {4, 1, ScheduleKind::kOneFOneB}, {2, 2, ScheduleKind::kInterleaved},
                            {4, 2, ScheduleKind::kInterleaved}}) {
    const Plan plan = program_plan(1, p, 1, v, kind, 0);
    const Schedule schedule = make_schedule(kind, p, v, 8);
    const Program program = make_program(model, train, plan);
    ASSERT_EQ(program.ranks.size(), static_cast<std::size_t>(p));
    for (std::int64_t r = 0; r < p; ++r) {
      const RankProgram& rank = program.ranks[static_cast<std::size_t>(r)];
      const auto& want = schedule.ops[static_cast<std::size_t>(r)];
      ASSERT_EQ(static_cast<std::size_t>(rank.tail_begin), want.size()) << plan.label();
      for (std::size_t i = 0; i < want.size(); ++i) {
        const ProgramOp& op = rank.ops[i];
        EXPECT_EQ(to_string(op.kind), to_string(want[i].kind)) << plan.label() << " op " << i;
        EXPECT_EQ(op.micro_batch, want[i].micro_batch);
        EXPECT_EQ(op.chunk, want[i].chunk);
        EXPECT_EQ(op.peer, want[i].peer);
        // A pass waits for the receive right before it; a send for the pass right before it.
        if (op.is_pass() && i > 0 && rank.ops[i - 1].is_message() &&
            (rank.ops[i - 1].kind == ProgramOpKind::kRecvForward ||
             rank.ops[i - 1].kind == ProgramOpKind::kRecvBackward)) {
          EXPECT_EQ(op.after[0], static_cast<std::int32_t>(i - 1));
        }
        if (op.kind == ProgramOpKind::kSendForward || op.kind == ProgramOpKind::kSendBackward) {
          EXPECT_EQ(op.after[0], static_cast<std::int32_t>(i - 1));
          EXPECT_TRUE(rank.ops[i - 1].is_pass());
        }
      }
      // The closed form of the schedule's activations in flight is the Program's too.
      EXPECT_EQ(max_in_flight(rank), max_in_flight(schedule, r)) << plan.label();
    }
  }
}

TEST(Program, OneFOneBHoldsMinOfStagesLeftAndMicroBatches) {
  // Narayanan et al. 2021: rank r of a 1F1B pipeline keeps p - r forwards in flight (at most m).
  const ModelSpec model = tiny_model();
  for (std::int64_t m : {2, 8}) {
    const Program program =
        make_program(model, train_of(m), program_plan(1, 4, 1, 1, ScheduleKind::kOneFOneB, 0));
    for (std::int64_t r = 0; r < 4; ++r) {
      EXPECT_EQ(max_in_flight(program.ranks[static_cast<std::size_t>(r)]), std::min(4 - r, m));
    }
  }
}

TEST(Program, ZeroThreeGathersOneStepAheadAndReleasesAfterUse) {
  // p = 1, 8 layers: a forward is embedding, layer0..7, head; the head reads the embedding
  // (tied wte) again, so the embedding is gathered twice per forward pass.
  const ModelSpec model = tiny_model();
  // global batch 8 over d = 2 in micro-batches of 2: m = 2.
  const RankProgram rank =
      make_rank_program(model, train_of(8), program_plan(1, 1, 2, 1, ScheduleKind::kOneFOneB, 3, 2), 0);
  const PassBody& fwd = rank.bodies[static_cast<std::size_t>(rank.ops[0].body)];
  ASSERT_TRUE(fwd.forward);
  std::vector<std::string> order;
  for (const ProgramOp& op : fwd.ops) {
    if (op.kind == ProgramOpKind::kGather || op.kind == ProgramOpKind::kCompute ||
        op.kind == ProgramOpKind::kRelease) {
      order.push_back(to_string(op.kind) + " " + rank.units[static_cast<std::size_t>(op.unit)].name);
    }
  }
  const std::vector<std::string> head = {"gather embedding", "gather layer0", "compute embedding",
                                         "release embedding", "gather layer1", "compute layer0",
                                         "release layer0"};
  ASSERT_GE(order.size(), head.size());
  EXPECT_EQ(std::vector<std::string>(order.begin(), order.begin() + 7), head);
  const std::vector<std::string> tail = {"gather embedding", "gather final_norm", "compute layer7",
                                         "release layer7", "compute final_norm",
                                         "release embedding", "release final_norm"};
  EXPECT_EQ(std::vector<std::string>(order.end() - 7, order.end()), tail);
  // Each compute waits for the gathers of its own units.
  for (const ProgramOp& op : fwd.ops) {
    if (op.kind != ProgramOpKind::kCompute) continue;
    for (std::int32_t a : op.after) {
      if (a >= 0) {
        EXPECT_EQ(fwd.ops[static_cast<std::size_t>(a)].kind, ProgramOpKind::kGather);
      }
    }
  }
  // Per step (m = 2): forward gathers every layer once per micro-batch, backward again.
  const auto flat = flatten(rank);
  EXPECT_EQ(count(flat, ProgramOpKind::kGather, "layer3"), 4);
  EXPECT_EQ(count(flat, ProgramOpKind::kRelease, "layer3"), 4);
  EXPECT_EQ(count(flat, ProgramOpKind::kGather, "embedding"), 4);  // forward twice, backward never
}

TEST(Program, OffloadedParamsAreFetchedPrefetchDistanceStepsAhead) {
  const ModelSpec model = tiny_model();
  Plan plan = program_plan(1, 1, 2, 1, ScheduleKind::kOneFOneB, 3, 2);
  plan.offload = {OffloadTier::kCpu, OffloadTier::kCpu, OffloadTier::kCpu};
  for (int distance : {1, 2, 3}) {
    ProgramOptions options;
    options.prefetch_distance = distance;
    const RankProgram rank = make_rank_program(model, train_of(4), plan, 0, options);
    for (const PassBody& body : rank.bodies) {
      // Compute steps seen so far when each unit's fetch and gather are issued.
      std::map<std::int32_t, int> fetched_at, gathered_at;
      int computes = 0;
      std::vector<int> lead;
      for (const ProgramOp& op : body.ops) {
        if (op.kind == ProgramOpKind::kCompute) ++computes;
        if (op.kind == ProgramOpKind::kFetch) fetched_at[op.unit] = computes;
        if (op.kind == ProgramOpKind::kGather) {
          // Every gather waits for a fetch of its unit issued earlier in the same body.
          ASSERT_TRUE(fetched_at.count(op.unit)) << describe(rank);
          EXPECT_EQ(body.ops[static_cast<std::size_t>(op.after[0])].kind, ProgramOpKind::kFetch);
          EXPECT_EQ(body.ops[static_cast<std::size_t>(op.after[0])].unit, op.unit);
        }
        if (op.kind == ProgramOpKind::kCompute && op.unit >= 0 && fetched_at.count(op.unit)) {
          lead.push_back(computes - 1 - fetched_at[op.unit]);
        }
      }
      // Past the first `distance` steps (fetched at the start), a unit is fetched while the
      // step `distance` before its own is still to run.
      for (std::size_t i = static_cast<std::size_t>(distance); i < lead.size(); ++i) {
        EXPECT_EQ(lead[i], distance) << "distance " << distance << "\n" << describe(rank);
      }
    }
  }
  ProgramOptions bad;
  bad.prefetch_distance = 0;
  EXPECT_THROW(make_rank_program(model, train_of(4), plan, 0, bad), ConfigError);
}

TEST(Program, EachUnitIsReducedOnceRightAfterItsLastGradient) {
  const ModelSpec model = tiny_model();
  for (int zero : {0, 1, 2, 3}) {
    // p = 2, v = 2, m = 4: rank 1 holds layers 2 3 6 7, the tied copy and the final norm.
    const Program program = make_program(model, train_of(4),
                                         program_plan(1, 2, 1, 2, ScheduleKind::kInterleaved, zero));
    for (const RankProgram& rank : program.ranks) {
      const auto flat = flatten(rank);
      for (const ProgramUnit& unit : rank.units) {
        EXPECT_EQ(count(flat, ProgramOpKind::kReduceGrads, unit.name), 1) << unit.name;
        EXPECT_EQ(count(flat, ProgramOpKind::kOptimizerStep, unit.name), 1) << unit.name;
        EXPECT_EQ(count(flat, ProgramOpKind::kGatherParams, unit.name), zero == 1 || zero == 2 ? 1 : 0);
      }
      // A layer's reduction follows the backward compute of the last micro-batch (3) of its
      // chunk, and no compute of that layer comes after it.
      for (std::size_t i = 0; i < flat.size(); ++i) {
        if (flat[i].kind != ProgramOpKind::kReduceGrads || flat[i].unit.rfind("layer", 0) != 0) continue;
        // Right after the compute (and, under ZeRO-3, the release of its parameters).
        std::size_t c = i - 1;
        if (flat[c].kind == ProgramOpKind::kRelease) --c;
        EXPECT_EQ(flat[c].kind, ProgramOpKind::kCompute);
        EXPECT_EQ(flat[c].unit, flat[i].unit);
        EXPECT_EQ(flat[i].micro_batch, 3);
        EXPECT_FALSE(flat[i].forward_pass);
        for (std::size_t j = i + 1; j < flat.size(); ++j) {
          EXPECT_FALSE(flat[j].kind == ProgramOpKind::kCompute && flat[j].unit == flat[i].unit);
        }
      }
    }
    // The tail of the last rank: the tied sum, the copy's reduction, the norm, then updates.
    const RankProgram& last = program.ranks[1];
    std::vector<std::string> tail;
    for (std::size_t i = static_cast<std::size_t>(last.tail_begin); i < last.ops.size() && tail.size() < 3; ++i) {
      tail.push_back(to_string(last.ops[i].kind));
    }
    EXPECT_EQ(tail, (std::vector<std::string>{"tied_embedding_sum", "reduce_grads", "grad_norm"}));
  }
}

TEST(Program, OffloadedGradientsGoDownAfterEveryBackwardOfALayer) {
  const ModelSpec model = tiny_model();
  Plan plan = program_plan(1, 1, 2, 1, ScheduleKind::kOneFOneB, 2, 1);
  plan.offload = {OffloadTier::kCpu, OffloadTier::kCpu, OffloadTier::kNone};
  const auto flat = flatten(make_rank_program(model, train_of(8), plan, 0));  // m = 4
  EXPECT_EQ(count(flat, ProgramOpKind::kReduceGrads, "layer5"), 4);
  EXPECT_EQ(count(flat, ProgramOpKind::kOffloadGrads, "layer5"), 4);
  EXPECT_EQ(count(flat, ProgramOpKind::kReduceGrads, "embedding"), 1);  // in the tail
  EXPECT_EQ(count(flat, ProgramOpKind::kOffloadGrads, "final_norm"), 1);
  // With sequence parallelism the LayerNorm sums come first, once per step.
  plan.tp = 2;
  plan.sequence_parallel = true;
  const auto sp = flatten(make_rank_program(model, train_of(8), plan, 0));
  EXPECT_EQ(count(sp, ProgramOpKind::kReduceGrads, "layer5"), 1);
  EXPECT_EQ(count(sp, ProgramOpKind::kSumNormGrads, "layer5"), 1);
  EXPECT_EQ(count(sp, ProgramOpKind::kSumNormGrads, "final_norm"), 1);
  for (std::size_t i = 0; i < sp.size(); ++i) {
    if (sp[i].kind == ProgramOpKind::kReduceGrads && sp[i].unit == "layer5") {
      EXPECT_EQ(sp[i - 1].kind, ProgramOpKind::kSumNormGrads);
    }
  }
}

// ZeRO-Offload's overlap: with the optimizer state on the host and no clipping, each layer's
// (and the final norm's) host AdamW is in the last micro-batch's backward, right after the
// op that makes its gradient final; the tail steps only what it reduces itself.
TEST(Program, HostOptimizerStepsEachLayerInTheBackwardWhenNothingIsClipped) {
  const ModelSpec model = tiny_model();
  for (const OffloadTier grads : {OffloadTier::kNone, OffloadTier::kCpu}) {
    Plan plan = program_plan(1, 1, 2, 1, ScheduleKind::kOneFOneB, 2, 1);
    plan.offload = {OffloadTier::kCpu, grads, OffloadTier::kNone};
    TrainSpec train = train_of(8);  // m = 4
    ASSERT_EQ(train.optimizer.grad_clip, 0.0);
    ProgramOptions beside;  // a backend with a host thread (the CPU backend's facts)
    beside.host_optimizer_in_backward = true;
    ASSERT_TRUE(optimizer_in_backward(plan, train, beside));
    const RankProgram rank = make_rank_program(model, train, plan, 0, beside);
    // The gradient is final after the reduction, or after its offload when it goes down.
    const ProgramOpKind final_op =
        grads == OffloadTier::kNone ? ProgramOpKind::kReduceGrads : ProgramOpKind::kOffloadGrads;
    std::map<std::string, int> in_body;
    for (const PassBody& body : rank.bodies) {
      for (std::size_t i = 0; i < body.ops.size(); ++i) {
        const ProgramOp& op = body.ops[i];
        if (op.kind != ProgramOpKind::kOptimizerStep) continue;
        EXPECT_TRUE(body.reduces) << "only the last micro-batch's backward steps";
        EXPECT_EQ(op.stream, Stream::kHost);
        ASSERT_GE(op.after[0], 0);
        const ProgramOp& before = body.ops[static_cast<std::size_t>(op.after[0])];
        EXPECT_EQ(before.kind, final_op);
        EXPECT_EQ(before.unit, op.unit);
        ++in_body[rank.units[static_cast<std::size_t>(op.unit)].name];
      }
    }
    // 8 layers and the final norm in the body; the embedding (reduced in the tail) in the tail.
    EXPECT_EQ(in_body.size(), 9u);
    for (const auto& [unit, n] : in_body) EXPECT_EQ(n, 1) << unit;
    EXPECT_EQ(in_body.count("embedding"), 0u);
    std::vector<std::string> tail_steps;
    for (std::size_t i = static_cast<std::size_t>(rank.tail_begin); i < rank.ops.size(); ++i) {
      if (rank.ops[i].kind == ProgramOpKind::kOptimizerStep) {
        tail_steps.push_back(rank.units[static_cast<std::size_t>(rank.ops[i].unit)].name);
      }
    }
    EXPECT_EQ(tail_steps, std::vector<std::string>{"embedding"});
    // ZeRO-2's parameter all-gathers stay in the tail, one per unit (after the pipeline).
    EXPECT_EQ(count(flatten(rank), ProgramOpKind::kGatherParams, "layer3"), 1);

    // Where the backend runs host work on its issuing thread (CUDA's facts), and with
    // clipping (every step waits for the global norm): all in the tail.
    const ProgramOptions issuing = executor_program_options(Backend::kCuda);
    EXPECT_FALSE(issuing.host_optimizer_in_backward);
    EXPECT_TRUE(executor_program_options(Backend::kCpu).host_optimizer_in_backward);
    EXPECT_FALSE(optimizer_in_backward(plan, train, issuing));
    TrainSpec clipping = train;
    clipping.optimizer.grad_clip = 1.0;
    EXPECT_FALSE(optimizer_in_backward(plan, clipping, beside));
    for (const RankProgram& tail_only : {make_rank_program(model, train, plan, 0, issuing),
                                         make_rank_program(model, clipping, plan, 0, beside)}) {
      for (const PassBody& body : tail_only.bodies) {
        for (const ProgramOp& op : body.ops) EXPECT_NE(op.kind, ProgramOpKind::kOptimizerStep);
      }
      EXPECT_EQ(count(flatten(tail_only), ProgramOpKind::kOptimizerStep, "layer3"), 1);
    }
  }
  // The optimizer on the device: its fused step stays in the tail.
  const Plan on_device = program_plan(1, 1, 2, 1, ScheduleKind::kOneFOneB, 2, 1);
  ProgramOptions beside;
  beside.host_optimizer_in_backward = true;
  EXPECT_FALSE(optimizer_in_backward(on_device, train_of(8), beside));
}

// The cache reads the train spec's clipping too: one plan, two Programs.
TEST(Program, TheCacheKeysOnWhereTheHostOptimizerSteps) {
  const ModelSpec model = tiny_model();
  Plan plan = program_plan(1, 1, 2, 1, ScheduleKind::kOneFOneB, 2, 1);
  plan.offload = {OffloadTier::kCpu, OffloadTier::kNone, OffloadTier::kNone};
  TrainSpec clipped = train_of(8);
  clipped.optimizer.grad_clip = 1.0;
  ProgramOptions beside;
  beside.host_optimizer_in_backward = true;
  RankProgramCache cache;
  const RankProgram overlapped = cache.get(model, train_of(8), plan, 0, beside);
  const RankProgram waiting = cache.get(model, clipped, plan, 0, beside);
  EXPECT_EQ(cache.made(), 2);
  EXPECT_NE(overlapped.ops, waiting.ops);  // the tail steps 1 unit, not 10
  EXPECT_EQ(waiting.ops, make_rank_program(model, clipped, plan, 0, beside).ops);
  EXPECT_EQ(overlapped.ops, make_rank_program(model, train_of(8), plan, 0, beside).ops);
}

// With clipping on and everything of ZeRO-3 in host memory, the tail's host steps are
// carried into the next step (program.h, "carried"): after the norm, one per unit in the
// units' (forward) order, each waited for at the first op of the step that names its unit,
// which is that unit's fetch in the first forward pass. Nothing else carries.
TEST(Program, ClippedHostStepsOfAHostResidentZeroThreeAreCarriedToTheirFetch) {
  const ModelSpec model = tiny_model();
  Plan plan = program_plan(1, 2, 2, 1, ScheduleKind::kOneFOneB, 3, 1);
  plan.offload = {OffloadTier::kCpu, OffloadTier::kCpu, OffloadTier::kCpu};
  TrainSpec clipped = train_of(8);
  clipped.optimizer.grad_clip = 1.0;
  const ProgramOptions beside = executor_program_options(Backend::kCpu);
  for (std::int64_t r = 0; r < plan.pp; ++r) {
    SCOPED_TRACE("pipeline rank " + std::to_string(r));
    const RankProgram rank = make_rank_program(model, clipped, plan, r, beside);
    ASSERT_TRUE(rank.carries());
    const auto carried = static_cast<std::size_t>(rank.carried_begin);
    ASSERT_EQ(rank.ops.size() - carried, rank.units.size());
    EXPECT_EQ(rank.ops[carried - 1].kind, ProgramOpKind::kGradNorm);
    ASSERT_EQ(rank.carried_waits.size(), rank.units.size());
    for (std::size_t u = 0; u < rank.units.size(); ++u) {
      const ProgramOp& update = rank.ops[carried + u];
      EXPECT_EQ(update.kind, ProgramOpKind::kOptimizerStep);
      EXPECT_EQ(update.stream, Stream::kHost);
      EXPECT_EQ(update.unit, static_cast<std::int32_t>(u));
      const RankProgram::CarriedWait& wait = rank.carried_waits[u];
      EXPECT_EQ(wait.unit, update.unit);
      const ProgramOp& pass = rank.ops[static_cast<std::size_t>(wait.op)];
      ASSERT_TRUE(pass.is_pass());
      EXPECT_EQ(pass.kind, ProgramOpKind::kForward);
      const auto& body = rank.bodies[static_cast<std::size_t>(pass.body)].ops;
      EXPECT_EQ(body[static_cast<std::size_t>(wait.body_op)].kind, ProgramOpKind::kFetch);
      EXPECT_EQ(body[static_cast<std::size_t>(wait.body_op)].unit, update.unit);
      // No op before it names the unit: not an earlier body op of this pass ...
      for (std::int32_t j = 0; j < wait.body_op; ++j) {
        EXPECT_NE(body[static_cast<std::size_t>(j)].unit, update.unit);
      }
      // ... nor one of an earlier pass.
      for (std::int32_t i = 0; i < wait.op; ++i) {
        const ProgramOp& earlier = rank.ops[static_cast<std::size_t>(i)];
        if (!earlier.is_pass()) continue;
        for (const ProgramOp& op : rank.bodies[static_cast<std::size_t>(earlier.body)].ops) {
          EXPECT_NE(op.unit, update.unit);
        }
      }
    }
    EXPECT_NE(describe(rank).find("carried into the next step:"), std::string::npos);
  }
  // CUDA carries them too (its host functions: cuda_backend.h), clipping or not: it steps no
  // layer in the backward.
  EXPECT_TRUE(make_rank_program(model, clipped, plan, 0, executor_program_options(Backend::kCuda)).carries());
  EXPECT_TRUE(make_rank_program(model, train_of(8), plan, 0, executor_program_options(Backend::kCuda)).carries());
  // Not carried: without clipping where the backend steps layers in the backward, on a backend without a
  // host stream beside the device's, with a tier on NVMe (its engine is the issuing
  // thread's), below ZeRO-3 (parameter all-gathers follow the steps), or with the
  // parameters on the device (the update writes them).
  EXPECT_FALSE(make_rank_program(model, train_of(8), plan, 0, beside).carries());
  ProgramOptions issuing = beside;
  issuing.host_steps_carried = false;
  EXPECT_FALSE(make_rank_program(model, clipped, plan, 0, issuing).carries());
  Plan nvme = plan;
  nvme.offload.optimizer = OffloadTier::kNvme;
  EXPECT_FALSE(make_rank_program(model, clipped, nvme, 0, beside).carries());
  Plan z2 = plan;
  z2.zero_stage = 2;
  z2.offload.params = OffloadTier::kNone;
  EXPECT_FALSE(make_rank_program(model, clipped, z2, 0, beside).carries());
  Plan device_params = plan;
  device_params.offload.params = OffloadTier::kNone;
  EXPECT_FALSE(make_rank_program(model, clipped, device_params, 0, beside).carries());
  // The cache tells the NVMe plan's Program from the host one's (program_plan reads both
  // tiers as offloaded).
  RankProgramCache cache;
  EXPECT_TRUE(cache.get(model, clipped, plan, 0, beside).carries());
  EXPECT_FALSE(cache.get(model, clipped, nvme, 0, beside).carries());
  EXPECT_EQ(cache.made(), 2);
}

TEST(Program, ReplicatedKvHeadsAreSummedRightBeforeEachReductionOfALayer) {
  ModelSpec model = tiny_model();
  model.kv_heads = 2;  // t = 4 > 2: each KV head on 2 TP ranks
  Plan plan = program_plan(4, 1, 2, 1, ScheduleKind::kOneFOneB, 0, 1);
  const auto flat = flatten(make_rank_program(model, train_of(8), plan, 0));
  EXPECT_EQ(count(flat, ProgramOpKind::kSumKvGrads, "layer5"), 1);
  EXPECT_EQ(count(flat, ProgramOpKind::kSumKvGrads, "embedding"), 0);
  EXPECT_EQ(count(flat, ProgramOpKind::kSumKvGrads, "final_norm"), 0);
  const auto sum_before_each_reduce = [](const std::vector<Flat>& ops) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind == ProgramOpKind::kReduceGrads && ops[i].unit == "layer5") {
        EXPECT_EQ(ops[i - 1].kind, ProgramOpKind::kSumKvGrads) << i;
      }
    }
  };
  sum_before_each_reduce(flat);
  // Offloaded gradients are reduced after every micro-batch (m = 8 / 2 = 4), each fresh:
  // summed before each of those reductions.
  plan.zero_stage = 2;
  plan.offload = {OffloadTier::kCpu, OffloadTier::kCpu, OffloadTier::kNone};
  const auto off = flatten(make_rank_program(model, train_of(8), plan, 0));
  EXPECT_EQ(count(off, ProgramOpKind::kReduceGrads, "layer5"), 4);
  EXPECT_EQ(count(off, ProgramOpKind::kSumKvGrads, "layer5"), 4);
  sum_before_each_reduce(off);
  // t = 2 splits the 2 KV heads: nothing to sum.
  plan.tp = 2;
  EXPECT_EQ(count(flatten(make_rank_program(model, train_of(8), plan, 0)),
                  ProgramOpKind::kSumKvGrads, "layer5"),
            0);
}

TEST(Program, PublishedRecomputationGathersTwiceInBackward) {
  const ModelSpec model = tiny_model();
  Plan plan = program_plan(1, 1, 2, 1, ScheduleKind::kOneFOneB, 3, 2);
  plan.recompute = Recompute::kFull;
  ProgramOptions published;
  published.recompute_regathers = true;
  const auto ours = flatten(make_rank_program(model, train_of(4), plan, 0));
  const auto theirs = flatten(make_rank_program(model, train_of(4), plan, 0, published));
  // m = 1: forward once, backward once (strata) or twice (published) per layer.
  EXPECT_EQ(count(ours, ProgramOpKind::kGather, "layer2"), 2);
  EXPECT_EQ(count(theirs, ProgramOpKind::kGather, "layer2"), 3);
  EXPECT_EQ(count(theirs, ProgramOpKind::kRelease, "layer2"), 2);
}

TEST(Program, BadPlansAreRejectedBeforeAnyOp) {
  const ModelSpec model = tiny_model();
  EXPECT_THROW(make_program(model, train_of(8), program_plan(3, 1, 1, 1, ScheduleKind::kOneFOneB, 0)),
               InfeasiblePlan);  // heads % 3
  EXPECT_THROW(make_program(model, train_of(8), program_plan(1, 3, 1, 1, ScheduleKind::kOneFOneB, 0)),
               InfeasiblePlan);  // layers % 3
  EXPECT_THROW(make_rank_program(model, train_of(8), program_plan(1, 2, 1, 1, ScheduleKind::kOneFOneB, 0), 2),
               InfeasiblePlan);
}

// The planner reuses a schedule's ops across the plans that share it (rank_pipeline_ops.h):
// a Program made from reused ops is the one made afresh, for every rank, whatever the plans
// made before it from the same ops held in their bodies (ZeRO-3 gathers, offloaded
// gradients, recomputation, a variant whose last backward reduces and one whose does not).
TEST(Program, ReusedScheduleOpsMakeTheSameProgram) {
  const ModelSpec model = tiny_model();
  std::vector<Plan> plans;
  for (const auto& [p, v, kind] : {std::tuple{2, 2, ScheduleKind::kInterleaved},
                                   std::tuple{4, 1, ScheduleKind::kOneFOneB},
                                   std::tuple{2, 1, ScheduleKind::kGpipe}}) {
    for (int zero : {0, 1, 3}) {
      Plan plan = program_plan(1, p, 2, v, kind, zero);
      plans.push_back(plan);
      plan.recompute = Recompute::kFull;
      plans.push_back(plan);
      if (zero == 3) {
        plan.offload = {OffloadTier::kCpu, OffloadTier::kCpu, OffloadTier::kNone};
        plans.push_back(plan);
      }
    }
  }
  RankPipelineOpsCache cache;
  int compared = 0;
  for (const bool second_time : {false, true}) {
    for (const Plan& plan : plans) {
      for (std::int64_t r = 0; r < plan.pp; ++r) {
        const RankProgram fresh = make_rank_program(model, train_of(8), plan, r);
        const RankProgram reused = make_rank_program(model, train_of(8), plan, r, {}, &cache);
        ASSERT_EQ(reused.ops, fresh.ops) << plan.label() << " rank " << r << (second_time ? " again" : "");
        ASSERT_EQ(reused.tail_begin, fresh.tail_begin);
        ASSERT_EQ(reused.bodies.size(), fresh.bodies.size());
        for (std::size_t b = 0; b < fresh.bodies.size(); ++b) {
          EXPECT_EQ(reused.bodies[b].ops, fresh.bodies[b].ops) << plan.label() << " body " << b;
        }
        ++compared;
      }
    }
  }
  // 3 schedules x (ZeRO 0, 1: 2 plans; ZeRO 3: 3) = 21 plans of 2, 4 or 2 ranks: 7*2 + 7*4
  // + 7*2 = 56 rank Programs, twice.
  EXPECT_EQ(compared, 112);
}

}  // namespace
}  // namespace strata
