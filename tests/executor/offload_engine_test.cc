// Offload tiers in the engine (ZeRO-Offload / ZeRO-Infinity on the CPU backend):
// - a model whose parameters and optimizer state are more than 4x the device budget trains
//   with parameters, gradients and optimizer state on NVMe, and its losses equal the
//   no-offload run's with an unlimited budget (within 1e-6 relative);
// - for several offload plans, the bytes counted on each link in each step equal
//   cost_model's offload_transfer_bytes() exactly, and the losses equal the no-offload run's;
//   the measured step time is printed beside the cost model's prediction (local-cpu cluster).
// Single rank (MPI singleton on MPI_COMM_SELF), and d = 2 / p = 2 plans when run under
// `mpirun -np 2` (registered so in offload_engine.cmake; skipped with a reason otherwise).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cost_model/program/chrome_trace.h"
#include "cost_model/specs/cluster_spec.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/errors.h"
#include "cost_model/pricing/time_model.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/data/corpus.h"
#include "executor/run/rank_training.h"
#include "executor/model/param_init.h"
#include "tests/executor/engine_mpi_environment.h"
#include "tests/executor/engine_test_support.h"
#include "tests/executor/omp_threads.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using testing_support::make_plan;

// A per-test NVMe directory under the build tree's temp space, removed afterwards.
class NvmeDir {
 public:
  explicit NvmeDir(const std::string& tag)
      : path_(fs::temp_directory_path() / ("strata-offload-engine-" + tag + "-" +
                                           std::to_string(::getpid()))) {
    fs::create_directories(path_);
  }
  ~NvmeDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct RunResult {
  std::vector<double> losses;
  std::vector<TransferBytes> transfers;  // per step
  std::vector<double> step_s;
  TierBytes peak;
  std::int64_t state_bytes = 0;  // params + m + v of this rank, fp32 (12 bytes per parameter)
};

RunResult run_plan(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                MpiCommunicator& world, int steps, const TierBudgets& budgets,
                const engine::OffloadOptions& options) {
  plan.check_against_model(model, train, "test plan");
  const auto corpus = data::generated_corpus(train.seed, 1 << 16);
  engine::RankTraining rank(model, train, plan, world, budgets, corpus, options);
  RunResult r;
  const engine::ModelState& state = rank.engine().state();
  for (std::size_t u = 0; u < state.size(); ++u) r.state_bytes += state.unit(u).padded * 12;
  for (int s = 0; s < steps; ++s) {
    const engine::StepResult step = rank.engine().step(s);
    r.losses.push_back(step.loss);
    r.transfers.push_back(step.transfers);
    r.step_s.push_back(step.step_s);
  }
  r.peak = rank.allocator().peak_bytes();
  return r;
}

std::string describe(const TransferBytes& t) {
  return fmt::format("d2h {:.0f}  h2d {:.0f}  to nvme {:.0f}  from nvme {:.0f}", t.device_to_host,
                     t.host_to_device, t.host_to_nvme, t.nvme_to_host);
}

Plan with_offload(Plan plan, OffloadTier optimizer, OffloadTier gradients, OffloadTier params) {
  plan.offload = OffloadPlan{optimizer, gradients, params};
  return plan;
}

// Trains `plan` and its no-offload twin; asserts equal losses, and each step's bytes per
// link equal to the cost model's; prints measured vs predicted step time.
void check_plan(const Plan& plan, MpiCommunicator& world, const fs::path& nvme) {
  const ModelSpec model = testing_support::tiny_model();
  const TrainSpec train = testing_support::tiny_train();
  constexpr int kSteps = 2;
  engine::OffloadOptions options;
  options.nvme_dir = nvme;
  options.prefetch_depth = 2;
  options.adam_tile_floats = 4096;  // several tiles per unit: the streamed path, tile by tile
  Plan plain = plan;
  plain.offload = {};
  const RunResult want = run_plan(model, train, plain, world, kSteps, {}, options);
  const RunResult got = run_plan(model, train, plan, world, kSteps, {}, options);
  const std::int64_t pp_rank = rank_coords(world.rank(), parallel_dims(plan)).pp;
  const TransferBytes predicted = offload_transfer_bytes(model, plan, train, pp_rank);
  const ClusterSpec cluster =
      ClusterSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/clusters/local-cpu.json");
  const Prediction prediction = predict(model, cluster, train, plan);
  for (int s = 0; s < kSteps; ++s) {
    SCOPED_TRACE(fmt::format("{} rank {} step {}", plan.label(), world.rank(), s));
    // Same training: the same kernels on the same values (gradients offloaded to the host are
    // summed over micro-batches in another order: at most an ulp or so per step).
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-6 * std::abs(want.losses[s]));
    // Bytes per link: exactly the cost model's count (both are sums of 4-byte elements).
    EXPECT_EQ(got.transfers[s], predicted)
        << "measured  " << describe(got.transfers[s]) << "\npredicted " << describe(predicted);
  }
  EXPECT_FALSE(predicted.empty());
  std::printf("%s rank %d: measured %s\n%*s predicted %s; step time measured %.4f s, "
              "predicted %.4f s (local-cpu cluster, uncalibrated)\n",
              plan.label().c_str(), world.rank(), describe(got.transfers.back()).c_str(),
              static_cast<int>(plan.label().size()) + 8, "", describe(predicted).c_str(),
              got.step_s.back(), prediction.step_time_s);
}

TEST(OffloadEngine, SingleRankPlansMoveThePredictedBytes) {
  auto self = MpiCommunicator::duplicate(MPI_COMM_SELF);
  NvmeDir nvme("single");
  using T = OffloadTier;
  // m = global_batch / b = 8 / 2 = 4 micro-batches: gradients go down 4 times per layer.
  const Plan z0 = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 0, 2);
  const Plan z1 = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 1, 2);
  const Plan z2 = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 2, 2);
  const Plan z3 = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 3, 2);
  for (const Plan& plan : {with_offload(z0, T::kCpu, T::kNone, T::kNone),
                           with_offload(z1, T::kNvme, T::kNone, T::kNone),
                           with_offload(z2, T::kNone, T::kCpu, T::kNone),
                           with_offload(z2, T::kCpu, T::kNvme, T::kNone),
                           with_offload(z3, T::kNone, T::kNone, T::kCpu),
                           with_offload(z3, T::kNone, T::kNvme, T::kNvme),
                           with_offload(z3, T::kNvme, T::kCpu, T::kCpu),
                           with_offload(z3, T::kNvme, T::kNvme, T::kNvme)}) {
    check_plan(plan, *self, nvme.path());
  }
}

TEST(OffloadEngine, TwoRankPlansMoveThePredictedBytes) {
  auto world = MpiCommunicator::duplicate(MPI_COMM_WORLD);
  if (world->size() != 2) GTEST_SKIP() << "needs mpirun -np 2 (offload_engine.cmake runs it so)";
  NvmeDir nvme("two-rank");
  using T = OffloadTier;
  // d = 2: shards of ceil(n / 2) (units padded to even sizes); p = 2: each stage its units,
  // the embedding on rank 0, the tied copy and final norm on rank 1.
  const Plan d2z3 = make_plan(1, 1, 2, 1, ScheduleKind::kOneFOneB, 3, 1);
  const Plan d2z2 = make_plan(1, 1, 2, 1, ScheduleKind::kGpipe, 2, 2);
  const Plan p2z0 = make_plan(1, 2, 1, 1, ScheduleKind::kOneFOneB, 0, 1);
  for (const Plan& plan : {with_offload(d2z3, T::kNvme, T::kNvme, T::kNvme),
                           with_offload(d2z3, T::kCpu, T::kNone, T::kCpu),
                           with_offload(d2z2, T::kNone, T::kCpu, T::kNone),
                           with_offload(d2z2, T::kNvme, T::kCpu, T::kNone),
                           with_offload(p2z0, T::kNvme, T::kNone, T::kNone)}) {
    check_plan(plan, *world, nvme.path());
  }
}

// ZeRO-Offload's overlap on the CPU backend (program.h, "optimizer"): without clipping, the
// host AdamW of each layer runs on the host stream's thread inside the last backward, after
// its gradient is final, while this thread goes on with the backward of the layers below;
// the training is the same (the step of a unit reads nothing another unit's step writes), and
// a validation pass, which runs the same bodies, steps nothing.
TEST(OffloadEngine, TheHostOptimizerOverlapsTheBackwardInTheTrace) {
  auto self = MpiCommunicator::duplicate(MPI_COMM_SELF);
  // One compute thread: the CPU backend runs host work apart only where the rank has a core
  // its compute leaves free (host_thread_has_a_core).
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores < 2) GTEST_SKIP() << "needs a core beside the compute thread";
  const testing_support::ScopedThreads threads(1);
  const ModelSpec model = testing_support::tiny_model();
  const TrainSpec train = testing_support::tiny_train();
  ASSERT_EQ(train.optimizer.grad_clip, 0.0) << "configs/train/tiny.json clips nothing";
  using T = OffloadTier;
  const Plan z2 = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 2, 2);
  const Plan plan = with_offload(z2, T::kCpu, T::kCpu, T::kNone);
  const auto corpus = data::generated_corpus(train.seed, 1 << 16);
  engine::RankTraining rank(model, train, plan, *self, {}, corpus, {});
  Plan plain = plan;
  plain.offload = {};
  engine::RankTraining resident(model, train, plain, *self, {}, corpus, {});
  // A validation pass between steps runs the same backward bodies, and must step nothing.
  const data::BatchSampler validation(corpus, train.seed + 1, model.seq_len);
  constexpr int kSteps = 4;
  int host_steps_in_backward = 0, overlapped = 0;
  for (int s = 0; s < kSteps; ++s) {
    const engine::StepResult step = rank.engine().step(s);
    EXPECT_NEAR(step.loss, resident.engine().step(s).loss, 1e-6 * step.loss) << "step " << s;
    // The parts still split the step: the hidden host time is left out of optimizer_s.
    EXPECT_GE(step.parts.other_s, 0.0) << "step " << s;
    EXPECT_NEAR(step.parts.sum(), step.step_s, 1e-9 * step.step_s + 1e-12) << "step " << s;
    const double valid = rank.engine().evaluate(validation, s);
    EXPECT_NEAR(valid, resident.engine().evaluate(validation, s), 1e-6 * valid) << "step " << s;
    const auto& events = step.events;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const TraceEvent& host = events[i];
      if (host.name != "optimizer_step" || !host.args.contains("body_op")) continue;
      ++host_steps_in_backward;
      EXPECT_EQ(host.tid, stream_tid(0, Stream::kHost));
      const double host_end = host.start_s + host.duration_s;
      // After the op that made its gradient final (the offload of the same unit) ...
      for (std::size_t j = 0; j < i; ++j) {
        const TraceEvent& down = events[j];
        if (down.name == "offload_grads" && down.args.value("unit", "") == host.args.value("unit", "")) {
          EXPECT_GE(host.start_s, down.start_s + down.duration_s - 1e-9) << host.args.dump();
        }
      }
      // ... and beside a compute op issued after it (the issuing thread did not wait).
      for (std::size_t j = i + 1; j < events.size(); ++j) {
        const TraceEvent& c = events[j];
        if (c.name == "compute" && c.start_s < host_end && c.start_s + c.duration_s > host.start_s) {
          ++overlapped;
          break;
        }
      }
    }
  }
  // 8 layers and the final norm, each step.
  EXPECT_EQ(host_steps_in_backward, kSteps * 9);
  // Whether a given step overlaps depends on the scheduler (two threads, two cores, other
  // tests beside them); that none of 36 does means the host work did not run apart.
  EXPECT_GT(overlapped, 0);
  std::printf("host AdamW steps inside the backward: %d, overlapping a later compute op: %d\n",
              host_steps_in_backward, overlapped);

  // With every core computing the host work runs inline, in list order: no event starts
  // before the one issued before it.
  const testing_support::ScopedThreads all(cores);
  engine::RankTraining inline_rank(model, train, plan, *self, {}, corpus, {});
  for (int s = 0; s < 2; ++s) {
    const engine::StepResult step = inline_rank.engine().step(s);
    for (std::size_t i = 1; i < step.events.size(); ++i) {
      EXPECT_GE(step.events[i].start_s, step.events[i - 1].start_s) << step.events[i].name;
    }
  }
}

// A model 4+ times the device budget: 8 layers of h = 256 (12 h^2 + 13 h = 789,760
// parameters each), s = 16, V = 256. Parameters + AdamW m, v in fp32: 12 bytes each.
ModelSpec wide_model() {
  return ModelSpec::from_json(Json{{"name", "wide"},
                                   {"layers", 8},
                                   {"hidden", 256},
                                   {"heads", 4},
                                   {"seq_len", 16},
                                   {"vocab", 256},
                                   {"ffn_hidden", 1024}},
                              "wide model");
}

// With clipping on, the host AdamW of a step cannot start before the global norm, so the tail
// carries it into the next step (program.h, "carried"): the step ends without waiting for it
// and the next step waits for each unit's update right before its fetch. The training is the
// same as stepping in the tail (bit for bit: the update of a unit reads only its own state,
// its gradient and the norm), with evaluation and state() in between seeing the stepped
// state; the next step's trace shows the carried updates on the host track beside its
// forward.
TEST(OffloadEngine, TheClippedHostOptimizerIsCarriedIntoTheNextForward) {
  auto self = MpiCommunicator::duplicate(MPI_COMM_SELF);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores < 2) GTEST_SKIP() << "needs a core beside the compute thread";
  const testing_support::ScopedThreads threads(1);
  // Layers of 789,760 parameters: an update (28 bytes a parameter) takes about as long as the
  // layer's forward, long enough to be seen beside it.
  const ModelSpec model = wide_model();
  TrainSpec train = testing_support::tiny_train();
  train.optimizer.grad_clip = 1.0;
  using T = OffloadTier;
  const Plan z3 = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 3, 2);
  const Plan plan = with_offload(z3, T::kCpu, T::kCpu, T::kCpu);
  const auto corpus = data::generated_corpus(train.seed, 1 << 16);
  engine::RankTraining rank(model, train, plan, *self, {}, corpus, {});
  ASSERT_TRUE(rank.engine().program().carries()) << describe(rank.engine().program());
  // The same plan without a host thread (every core computing): the tail steps inline.
  std::vector<engine::StepResult> inline_steps;
  std::vector<double> inline_valid;
  const data::BatchSampler validation(corpus, train.seed + 1, model.seq_len);
  constexpr int kSteps = 4;
  {
    const testing_support::ScopedThreads all(cores);
    engine::RankTraining inline_rank(model, train, plan, *self, {}, corpus, {});
    for (int s = 0; s < kSteps; ++s) {
      inline_steps.push_back(inline_rank.engine().step(s));
      inline_valid.push_back(inline_rank.engine().evaluate(validation, s));
    }
  }
  int carried_events = 0, overlapped = 0, clipped = 0;
  for (int s = 0; s < kSteps; ++s) {
    const engine::StepResult step = rank.engine().step(s);
    // Bit for bit: the same updates in the same order, only later.
    EXPECT_EQ(step.loss, inline_steps[static_cast<std::size_t>(s)].loss) << "step " << s;
    EXPECT_EQ(step.grad_norm, inline_steps[static_cast<std::size_t>(s)].grad_norm) << "step " << s;
    clipped += step.grad_norm > train.optimizer.grad_clip ? 1 : 0;
    EXPECT_GE(step.parts.other_s, 0.0) << "step " << s;
    EXPECT_NEAR(step.parts.sum(), step.step_s, 1e-9 * step.step_s + 1e-12) << "step " << s;
    for (const TraceEvent& host : step.events) {
      if (!host.args.value("carried", false)) continue;
      ++carried_events;
      EXPECT_GT(s, 0) << "the first step has no last step to carry from";
      EXPECT_EQ(host.tid, stream_tid(0, Stream::kHost));
      const double host_end = host.start_s + host.duration_s;
      for (const TraceEvent& c : step.events) {
        if (c.name == "compute" && c.start_s < host_end && c.start_s + c.duration_s > host.start_s) {
          ++overlapped;
          break;
        }
      }
    }
    // Every other step: evaluation drains the carried updates first (state() alike).
    if (s % 2 == 1) {
      EXPECT_EQ(rank.engine().evaluate(validation, s), inline_valid[static_cast<std::size_t>(s)]);
    }
  }
  // The clipping ran (the first steps' norms are above 1): what the carry must not change.
  EXPECT_GT(clipped, 0);
  // Steps 1 and 3 follow a step whose updates were carried and not drained (2 follows an
  // evaluation): 8 layers, the embedding and the final norm each.
  EXPECT_EQ(carried_events, 2 * 10);
  EXPECT_GT(overlapped, 0);
  std::printf("carried host AdamW steps in the next step's trace: %d, beside a compute op: %d\n",
              carried_events, overlapped);
}

TEST(OffloadEngine, ModelFourTimesTheDeviceBudgetTrainsFromNvme) {
  auto self = MpiCommunicator::duplicate(MPI_COMM_SELF);
  NvmeDir nvme("budget");
  const ModelSpec model = wide_model();
  TrainSpec train = testing_support::tiny_train();
  train.global_batch = 2;  // m = 2 micro-batches of 1 sequence
  constexpr int kSteps = 3;
  const Plan plain = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 3, 1);
  Plan infinity = plain;
  infinity.offload = {OffloadTier::kNvme, OffloadTier::kNvme, OffloadTier::kNvme};
  engine::OffloadOptions options;
  options.nvme_dir = nvme.path();
  options.prefetch_depth = 2;
  // On the device at once (d = 1, a layer is 789,760 x 4 = 3.16 MB): in backward the layer
  // and the next one gathered, the layer's full gradient, one prefetched shard, plus
  // activations and the head: 4 x 3.16 MB + scratch, under 16 MiB.
  TierBudgets small;
  small.device_bytes = 16 << 20;
  const RunResult want = run_plan(model, train, plain, *self, kSteps, TierBudgets{}, options);
  const RunResult got = run_plan(model, train, infinity, *self, kSteps, small, options);
  // The premise: params + m + v (12 bytes x 6.39 M parameters = 76.7 MB) > 4 x 16 MiB.
  EXPECT_GT(got.state_bytes, 4 * small.device_bytes);
  EXPECT_LE(got.peak.device, static_cast<double>(small.device_bytes));
  // Without offload the same model does not fit the budget at all (its state alone does not).
  EXPECT_GT(want.peak.device, static_cast<double>(small.device_bytes));
  // The state lives on NVMe: params, m, v, gradients = 16 bytes per parameter.
  EXPECT_GE(got.peak.nvme, static_cast<double>(got.state_bytes));
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-6 * std::abs(want.losses[s])) << "step " << s;
    std::printf("step %d: loss %.9f (nvme, 16 MiB device) vs %.9f (no offload), "
                "step time %.3f s vs %.3f s\n",
                s, got.losses[s], want.losses[s], got.step_s[s], want.step_s[s]);
  }
  EXPECT_LT(got.losses.back(), got.losses.front());  // it trains
  std::printf("peak device %.2f MiB (budget 16), host %.2f MiB, nvme %.2f MiB\n",
              got.peak.device / (1 << 20), got.peak.host / (1 << 20), got.peak.nvme / (1 << 20));
}

using Threads = testing_support::ScopedThreads;

TEST(OffloadEngine, OffloadedStateIsPlacedWithTheSingleThreadBitsAndCountedPerTier) {
  // Set-up draws the parameters on every thread, straight into host memory or through a
  // page-aligned buffer written to NVMe without the bounce buffer: in every tier each unit's
  // fp32 master holds init_unit_range's values drawn by one thread, bit for bit, and its
  // moments zeros, at 1 and at 2 threads. The wide model's units (3.16 MB a layer) are
  // over the parallel loops' threshold and whole pages of mapped memory; 2 of its layers.
  auto self = MpiCommunicator::duplicate(MPI_COMM_SELF);
  NvmeDir nvme("placed");
  ModelSpec model = wide_model();
  model.layers = 2;
  TrainSpec train = testing_support::tiny_train();
  train.global_batch = 2;
  using T = OffloadTier;
  const Plan z1 = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 1, 1);
  const Plan z3 = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 3, 1);
  // Bytes per (padded) parameter on each tier {device, host, nvme}, d = 1, fp32:
  //   z3 o/g/p on a tier: params, gradients, m, v there (4 each) = 16;
  //   z1 optimizer on a tier: params and full gradients on the device (8), master, m, v on
  //   the tier (12).
  struct Case {
    Plan plan;
    TierBytes per_param;
  };
  const Case cases[] = {
      {with_offload(z3, T::kCpu, T::kCpu, T::kCpu), {0, 16, 0}},
      {with_offload(z3, T::kNvme, T::kNvme, T::kNvme), {0, 0, 16}},
      {with_offload(z1, T::kCpu, T::kNone, T::kNone), {8, 12, 0}},
      {with_offload(z1, T::kNvme, T::kNone, T::kNone), {8, 0, 12}},
  };
  for (const Case& c : cases) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(fmt::format("{}, {} threads", c.plan.label(), threads));
      const Threads t(threads);
      engine::OffloadOptions options;
      options.nvme_dir = nvme.path();
      TierBytes told;
      int calls = 0;
      options.on_placed = [&](const TierBytes& placed) {
        told = placed;
        ++calls;
      };
      const auto corpus = data::generated_corpus(train.seed, 1 << 16);
      engine::RankTraining rank(model, train, c.plan, *self, {}, corpus, options);
      engine::ModelState& state = rank.engine().state();
      double padded = 0;
      for (std::size_t u = 0; u < state.size(); ++u) {
        const UnitLayout& layout = state.unit(u).layout;
        padded += static_cast<double>(state.unit(u).padded);
        const engine::ModelState::Part part = state.optimizer_part(u);
        std::vector<float> want(static_cast<std::size_t>(part.end - part.begin));
        {
          const Threads one(1);
          model::init_unit_range(layout, train.seed, want.data(), part.begin, part.end);
        }
        const std::vector<float> got = state.read_part(u, engine::ModelState::StateKind::kParams);
        ASSERT_EQ(got.size(), want.size()) << layout.name;
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << layout.name;
        for (auto kind : {engine::ModelState::StateKind::kAdamM, engine::ModelState::StateKind::kAdamV}) {
          const std::vector<float> moments = state.read_part(u, kind);
          EXPECT_TRUE(std::all_of(moments.begin(), moments.end(), [](float x) { return x == 0.0f; }))
              << layout.name;
        }
      }
      // One call a unit, the last with the totals.
      EXPECT_EQ(calls, static_cast<int>(state.size()));
      EXPECT_EQ(told.device, c.per_param.device * padded);
      EXPECT_EQ(told.host, c.per_param.host * padded);
      EXPECT_EQ(told.nvme, c.per_param.nvme * padded);
    }
  }
}

TEST(OffloadEngine, NoOffloadMovesNothing) {
  // The bytes model says zero for a plan without offload, and the engine counts zero.
  const ModelSpec model = testing_support::tiny_model();
  const TrainSpec train = testing_support::tiny_train();
  const Plan plan = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 3, 2);
  EXPECT_TRUE(offload_transfer_bytes(model, plan, train, 0).empty());
  auto self = MpiCommunicator::duplicate(MPI_COMM_SELF);
  const RunResult r = run_plan(model, train, plan, *self, 1, {}, {});
  EXPECT_TRUE(r.transfers[0].empty());
}

TEST(OffloadEngine, UnwritableNvmeDirIsASystemErrorNamingIt) {
  auto self = MpiCommunicator::duplicate(MPI_COMM_SELF);
  const ModelSpec model = testing_support::tiny_model();
  const TrainSpec train = testing_support::tiny_train();
  Plan plan = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 0, 2);
  plan.offload.optimizer = OffloadTier::kNvme;
  engine::OffloadOptions options;
  options.nvme_dir = "/proc/strata-forbidden";
  const auto corpus = data::generated_corpus(train.seed, 1 << 16);
  try {
    engine::RankTraining rank(model, train, plan, *self, {}, corpus, options);
    FAIL() << "expected a SystemError";
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/strata-forbidden"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
