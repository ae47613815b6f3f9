// Captured steps (CUDA graphs: engine.h, "Captured steps") under the CPU backend's
// CUDA-semantics mode, one rank. The mode records a captured step's work as a graph records
// it and replays the same closures, the same pointers and arguments, so what CUDA would do
// with a replayed step shows here:
// - a captured run trains to the plain CPU backend's bits (losses and gradient norms) with
//   the learning rate changing every step (warmup, then cosine decay) and clipping active:
//   everything that changes from step to step is read from memory when the replay runs;
// - a replay that bakes the step's values into its launch, as a kernel argument does, trains
//   to other bits (the planted fault: the learning rate, step and clip factor read at issue);
// - the host round trip of a step issued op by op (the norm read back to clip on the host)
//   is refused while capturing, naming the call, as CUDA fails the capture (the pageable
//   copy of its tokens: cuda_semantics_test.cc);
// - a block the graph uses as scratch, taken by other work between two steps, makes the next
//   step capture afresh, and the block keeps what its holder wrote; a block the graph never
//   used, taken and given back, does not; a validation pass between steps changes nothing.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cost_model/specs/errors.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/cpu/cuda_semantics/cuda_semantics_backend.h"
#include "executor/data/batch.h"
#include "executor/data/corpus.h"
#include "executor/run/rank_training.h"
#include "tests/executor/engine_test_support.h"

namespace strata::graph_cuda_semantics_test {
namespace {

using testing_support::make_plan;

enum class Fault { kNone, kValuesBakedAtIssue, kNormReadOnTheHost };

// The CUDA-semantics backend, capturing steps, with one fault planted.
class CapturingBackend final : public cuda_semantics::CudaSemanticsBackend {
 public:
  CapturingBackend(AccountingAllocator& alloc, CommunicatorFactory& host, Fault fault)
      : CudaSemanticsBackend(alloc, host, /*capture_steps=*/true), fault_(fault) {}

  void adamw_from_device(const std::vector<engine::AdamWSpan>& tensors,
                         const engine::AdamWStep& hp,
                         const engine::DeviceStepScalars* scalars) override {
    if (fault_ != Fault::kValuesBakedAtIssue) {
      CudaSemanticsBackend::adamw_from_device(tensors, hp, scalars);
      return;
    }
    // A launch argument: whatever the values are when the update is issued, kept for every
    // replay.
    engine::AdamWStep baked = hp;
    baked.lr = scalars->values.lr;
    baked.step = scalars->step;
    adamw(tensors, baked, scalars->values.grad_scale);
  }
  void sum_squares_on_device(const std::vector<std::vector<engine::FloatSpan>>& groups,
                             double* sum) override {
    if (fault_ != Fault::kNormReadOnTheHost) {
      CudaSemanticsBackend::sum_squares_on_device(groups, sum);
      return;
    }
    // The step as issued op by op: the norm read back to the host, which clips there.
    double total = 0;
    for (const auto& group : groups) total += sum_of_squares_over(group);
    (void)total;
  }

 private:
  Fault fault_;
};

engine::BackendMaker capturing(Fault fault) {
  return [fault](AccountingAllocator& alloc,
                 const engine::RankPlace& place) -> std::unique_ptr<engine::Backend> {
    return std::make_unique<CapturingBackend>(alloc, *place.host, fault);
  };
}

// The learning rate moves every step (2 warmup steps, then cosine decay to 0.1 lr by step 6)
// and the clip is below the norms, so a replay that kept any of them would drift.
constexpr double kClip = 0.05;
TrainSpec scheduled_train() {
  TrainSpec spec = testing_support::tiny_train();
  spec.optimizer.grad_clip = kClip;
  spec.optimizer.lr_warmup_steps = 2;
  spec.optimizer.lr_decay_style = OptimizerSpec::DecayStyle::kCosine;
  spec.optimizer.lr_decay_steps = 6;
  spec.optimizer.min_lr = spec.optimizer.lr / 10;
  return spec;
}

constexpr int kSteps = 5;

struct RunValues {
  testing_support::StepValues values;
  std::vector<double> validation;  // validate: the validation loss after each step
  std::vector<std::size_t> events;  // trace events per step
  bool captured = false;
  int recaptures = 0;
  bool held_block_untouched = true;  // hold_block_after
};

// hold_block_after >= 0: after that step, takes a block of the size the layers' activations
// come in (so a class the captured step uses as scratch), fills it with NaN and keeps it to
// the end (the run then checks it still holds NaN); after the next, takes and gives back a
// block of a class the step never uses.
RunValues train(const ModelSpec& model, const Plan& plan, const engine::BackendMaker& backend,
          int hold_block_after = -1, bool validate = false) {
  auto self = MpiCommunicator::duplicate(MPI_COMM_SELF);
  const TrainSpec spec = scheduled_train();
  plan.check_against_model(model, spec, "test plan");
  const auto corpus = data::generated_corpus(spec.seed, 1 << 16);
  engine::RankTraining rank(model, spec, plan, *self, TierBudgets{},
                            data::TokenView::of_bytes(corpus), {}, backend);
  RunValues run;
  const data::BatchSampler validation(corpus, spec.seed + 1, model.seq_len);
  engine::Tensor held;
  const std::int64_t held_n = plan.micro_batch * model.seq_len * model.hidden;
  for (int s = 0; s < kSteps; ++s) {
    const engine::StepResult r = rank.engine().step(s);
    run.values.losses.push_back(r.loss);
    run.values.grad_norms.push_back(r.grad_norm);
    run.events.push_back(r.events.size());
    if (validate) run.validation.push_back(rank.engine().evaluate(validation, s));
    if (s == hold_block_after) {
      held = rank.backend().allocate(MemoryTier::kDevice, DType::kF32, held_n, "held by a test", false);
      rank.backend().fill(held.f32(), std::numeric_limits<float>::quiet_NaN(), held_n);
    }
    if (hold_block_after >= 0 && s == hold_block_after + 1) {
      // A block of a class the step never uses, taken and given back: one more free block,
      // the graph's all still free, so no capture afresh.
      engine::Tensor other = rank.backend().allocate(MemoryTier::kDevice, DType::kF32,
                                                     (std::int64_t{3} << 20) + 5, "other", false);
    }
  }
  if (!held.empty()) {
    std::vector<float> back(static_cast<std::size_t>(held_n));
    rank.backend().copy(back.data(), held.data(), held.bytes(), Stream::kCompute);
    for (float x : back) run.held_block_untouched = run.held_block_untouched && std::isnan(x);
  }
  run.captured = rank.engine().captures_steps();
  run.recaptures = rank.engine().recaptures();
  return run;
}

std::string failure_of(const ModelSpec& model, const Plan& plan, Fault fault) {
  try {
    train(model, plan, capturing(fault));
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

struct Case {
  ModelSpec model;
  Plan plan;
};

std::vector<Case> one_rank_plans() {
  // micro-batch 2 of the global batch 8: 4 micro-batches a step.
  Plan zero3 = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 3, 2);
  zero3.recompute = Recompute::kSelective;
  return {{testing_support::tiny_model(), make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 0, 2)},
          {testing_support::tiny_model(), zero3},
          {testing_support::tiny_llama_model(), make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 1, 4)}};
}

TEST(CapturedStepsUnderCudaSemantics, TrainToThePlainCpuBackendsBits) {
  for (const Case& c : one_rank_plans()) {
    SCOPED_TRACE(c.model.name + " " + c.plan.label());
    const RunValues want = train(c.model, c.plan, engine::cpu_backend_maker());
    const RunValues got = train(c.model, c.plan, capturing(Fault::kNone));
    EXPECT_TRUE(got.captured);
    EXPECT_EQ(got.values.losses, want.values.losses);
    EXPECT_EQ(got.values.grad_norms, want.values.grad_norms);
    // Every replay reports the step's ops, as a step issued op by op does.
    EXPECT_EQ(got.events, want.events);
    ASSERT_EQ(want.values.grad_norms.size(), static_cast<std::size_t>(kSteps));
    EXPECT_GT(want.values.grad_norms.back(), kClip);  // clipping is active to the last step
  }
}

TEST(CapturedStepsUnderCudaSemantics, AReplayWithItsValuesBakedAtIssueDrifts) {
  const Case c = one_rank_plans().front();
  const RunValues want = train(c.model, c.plan, engine::cpu_backend_maker());
  const RunValues got = train(c.model, c.plan, capturing(Fault::kValuesBakedAtIssue));
  // Steps 1 and 2 run before any replay (the first op by op, the second captured and
  // launched once); the learning rate differs at each later step.
  ASSERT_EQ(got.values.losses.size(), want.values.losses.size());
  EXPECT_NE(got.values.losses.back(), want.values.losses.back());
}

TEST(CapturedStepsUnderCudaSemantics, TheNormReadBackToTheHostIsRefusedWhileCapturing) {
  const Case c = one_rank_plans().front();
  const std::string refused = failure_of(c.model, c.plan, Fault::kNormReadOnTheHost);
  EXPECT_TRUE(has(refused, "during stream capture")) << refused;
  EXPECT_TRUE(has(refused, "host wait for the compute stream")) << refused;
}

TEST(CapturedStepsUnderCudaSemantics, ABlockTakenBetweenStepsMakesTheNextStepCaptureAfresh) {
  const Case c = one_rank_plans().front();
  const RunValues want = train(c.model, c.plan, engine::cpu_backend_maker());
  // Taken after step 2 (the captured one): step 3 would have replayed into it.
  const RunValues got = train(c.model, c.plan, capturing(Fault::kNone), /*hold_block_after=*/1);
  EXPECT_EQ(got.recaptures, 1);
  EXPECT_TRUE(got.held_block_untouched);
  EXPECT_EQ(got.values.losses, want.values.losses);
  EXPECT_EQ(got.values.grad_norms, want.values.grad_norms);
}

// A validation pass between steps runs the passes op by op (its own tokens, nothing stepped):
// neither its loss nor the steps' may change, and the replays after it keep reporting their
// own losses.
TEST(CapturedStepsUnderCudaSemantics, AValidationPassBetweenReplaysChangesNothing) {
  const Case c = one_rank_plans().front();
  const RunValues want = train(c.model, c.plan, engine::cpu_backend_maker(), -1, true);
  const RunValues got = train(c.model, c.plan, capturing(Fault::kNone), -1, true);
  EXPECT_EQ(got.values.losses, want.values.losses);
  EXPECT_EQ(got.values.grad_norms, want.values.grad_norms);
  EXPECT_EQ(got.validation, want.validation);
}

TEST(CapturedSteps, NoPipelineNoOffloadAndCollectivesOnTheDevice) {
  const auto why = [](const Plan& plan, bool on_device) {
    return engine::why_steps_not_captured(plan, on_device);
  };
  EXPECT_EQ(why(make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 3, 2), false), "");
  EXPECT_EQ(why(make_plan(2, 1, 2, 1, ScheduleKind::kOneFOneB, 1, 2), true), "");
  EXPECT_TRUE(has(why(make_plan(1, 1, 2, 1, ScheduleKind::kOneFOneB, 1, 2), false),
                  "2 ranks whose collectives go through host memory"));
  EXPECT_TRUE(has(why(make_plan(1, 2, 1, 1, ScheduleKind::kOneFOneB, 0, 2), true), "pp 2"));
  Plan offloaded = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 3, 2);
  offloaded.offload.params = OffloadTier::kCpu;
  EXPECT_TRUE(has(why(offloaded, true), "offloaded"));
}

}  // namespace
}  // namespace strata::graph_cuda_semantics_test
