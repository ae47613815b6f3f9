// The layer kernel list (executor/model/layer_kernels.def) against what a training step runs:
// the CPU backend's ops wrapped by ops generated from the same list, which count each call.
// A step of GPT (LayerNorm, GeLU, learned positions) and of Llama (RMSNorm, SwiGLU, rotary)
// calls only kernels whose `uses` include that model's choices, calls every kernel used by its
// choices alone (a wrong `uses` fails one way or the other), and the FLOPs the list gives the
// calls add up to the cost model's count: per token, for each layer
// layer_forward_flops_per_token and for the output layer logits_forward_flops_per_token, the
// backward twice the forward (every matmul_backward computes both its GEMMs here).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "cost_model/specs/layer_tensors.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/data/corpus.h"
#include "executor/model/kernel_use.h"
#include "executor/model/layer_ops.h"
#include "executor/run/rank_training.h"
#include "tests/executor/engine_test_support.h"

namespace strata::model {
namespace {

struct KernelCalls {
  unsigned uses = 0;
  int calls = 0;
  double flops = 0;
};

// The backend's ops, each kernel counted with the list's uses and FLOPs before it runs.
class CountingLayerOps final : public LayerOps {
 public:
  explicit CountingLayerOps(LayerOps& inner) : inner_(&inner) {}

  DType dtype() const override { return inner_->dtype(); }
  engine::Tensor activations(std::int64_t n, const std::string& tag) override {
    return inner_->activations(n, tag);
  }
  engine::Tensor floats(std::int64_t n, const std::string& tag) override {
    return inner_->floats(n, tag);
  }
  std::int64_t attention_stats_floats(int B, int T, int NH) const override {
    return inner_->attention_stats_floats(B, T, NH);
  }
  const char* attention_stats_name() const override { return inner_->attention_stats_name(); }
  int logits_width(int valid, int shard_rows) const override {
    return inner_->logits_width(valid, shard_rows);
  }
  void cross_entropy_forward_backward(float* losses, engine::Tensor& logits,
                                      const float* dlosses, const std::int32_t* targets, int BT,
                                      int Vlocal, int ld, int v0, TpContext& tp) override {
    inner_->cross_entropy_forward_backward(losses, logits, dlosses, targets, BT, Vlocal, ld, v0,
                                           tp);
  }

#define STRATA_LAYER_KERNEL(name, uses, params, args, flops, ...) \
  void name params override {                                     \
    count(#name, uses, flops);                                    \
    inner_->name args;                                            \
  }
#include "executor/model/layer_kernels.def"

  const std::map<std::string, KernelCalls>& calls() const { return calls_; }

 private:
  void count(const char* name, unsigned uses, double flops) {
    KernelCalls& k = calls_[name];
    k.uses = uses;
    ++k.calls;
    k.flops += flops;
  }

  LayerOps* inner_;
  std::map<std::string, KernelCalls> calls_;
};

class CountingBackend final : public cpu_backend::CpuBackend {
 public:
  CountingBackend(AccountingAllocator& alloc, CommunicatorFactory& comms)
      : CpuBackend(alloc, comms), counting_(CpuBackend::layer_ops()) {}
  LayerOps& layer_ops() override { return counting_; }
  const CountingLayerOps& counting() const { return counting_; }

 private:
  CountingLayerOps counting_;
};

// Every kernel of the list with its uses, whether called or not.
std::map<std::string, unsigned> listed_uses() {
  std::map<std::string, unsigned> uses;
#define STRATA_LAYER_KERNEL(name, kernel_uses, params, args, flops, ...) uses[#name] = kernel_uses;
#include "executor/model/layer_kernels.def"
  return uses;
}

struct StepCount {
  std::map<std::string, KernelCalls> calls;
  double tokens = 0;
};

// The kernels one training step of `model` calls on one rank holding the whole model.
StepCount count_one_step(const ModelSpec& model) {
  const TrainSpec train = testing_support::tiny_train();
  const Plan plan = testing_support::make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 0, 4);
  plan.check_against_model(model, train, "counting plan");
  const auto corpus = data::generated_corpus(train.seed, 1 << 16);
  auto world = MpiCommunicator::duplicate(MPI_COMM_SELF);
  const CountingBackend* backend = nullptr;
  const engine::BackendMaker maker = [&backend](AccountingAllocator& alloc,
                                                const engine::RankPlace& place) {
    auto made = std::make_unique<CountingBackend>(alloc, *place.host);
    backend = made.get();
    return std::unique_ptr<engine::Backend>(std::move(made));
  };
  engine::RankTraining rank(model, train, plan, *world, TierBudgets{},
                            data::TokenView::of_bytes(corpus), {}, maker);
  rank.engine().step(0);
  return {backend->counting().calls(),
          static_cast<double>(train.global_batch) * static_cast<double>(model.seq_len)};
}

void expect_uses_match(const ModelSpec& model, const StepCount& step) {
  const unsigned model_uses = kernel_uses(model, /*tp=*/1);
  for (const auto& [name, k] : step.calls) {
    EXPECT_NE(k.uses & model_uses, 0u) << model.name << " calls " << name
                                       << ", which the list does not say it uses";
  }
  // A kernel the model's choices alone use (not every model's, not TP's) must be called.
  for (const auto& [name, uses] : listed_uses()) {
    if ((uses & (kEveryModel | kTensorParallel)) != 0 || (uses & model_uses) == 0) continue;
    EXPECT_EQ(step.calls.count(name), 1u) << model.name << " never calls " << name
                                          << ", which the list says its choices use";
  }
}

void expect_flops_match(const ModelSpec& model, const StepCount& step) {
  double forward = 0, backward = 0;
  for (const auto& [name, k] : step.calls) {
    const bool is_backward = name.find("backward") != std::string::npos;
    (is_backward ? backward : forward) += k.flops;
  }
  // Per token: each layer's GEMMs and full-square attention, and the logits GEMM.
  const double want = static_cast<double>(model.layers) * layer_forward_flops_per_token(model) +
                      logits_forward_flops_per_token(model);
  EXPECT_NEAR(forward / step.tokens, want, 1e-9 * want) << model.name;
  EXPECT_NEAR(backward, 2 * forward, 1e-9 * forward) << model.name;
}

// One step of `model`: `called` among its kernels, `not_called` not (the other norm), then
// the uses and the FLOPs.
void expect_step_matches_the_list(const ModelSpec& model, const char* called,
                                  const char* not_called) {
  const StepCount step = count_one_step(model);
  ASSERT_FALSE(step.calls.empty());
  EXPECT_EQ(step.calls.count(called), 1u) << model.name;
  EXPECT_EQ(step.calls.count(not_called), 0u) << model.name;
  expect_uses_match(model, step);
  expect_flops_match(model, step);
}

TEST(LayerKernels, AGptStepCallsWhatTheListSaysAndCountsTheCostModelsFlops) {
  expect_step_matches_the_list(testing_support::tiny_model(), "layernorm_forward",
                               "rmsnorm_forward");
}

TEST(LayerKernels, ALlamaStepCallsWhatTheListSaysAndCountsTheCostModelsFlops) {
  expect_step_matches_the_list(testing_support::tiny_llama_model(), "rope_forward",
                               "layernorm_forward");
}

TEST(LayerKernels, EveryListedKernelHasAUse) {
  for (const auto& [name, uses] : listed_uses()) EXPECT_NE(uses, 0u) << name;
}

}  // namespace
}  // namespace strata::model
