// What a pipeline stage of the published 1T plan (t8 p64 d6 v2, interleaved 1F1B, full
// recompute, no SP: configs/plans/megatron-1t.json) holds on strata's CUDA engine, derived by
// hand and checked against the memory model's Program walk (estimate_memory on selene-a100).
//
// The walk is the engine to the byte (tests/executor/cuda_pool_prediction_test.cc replays
// the real Engine on the pool recorder), so the figure below is what strata's engine would
// ask for. Megatron-LM trained this plan on 80 GiB A100s; strata's engine would not: it
// keeps every pipeline send's buffer until the step's end (engine.cc: Engine::message posts
// the send into sends_, finish_sends waits for them all after the pipeline), so a middle
// rank holds about 2 m v messages by the end of its steady phase. Without them the stage
// holds 52.1 GiB, as Megatron's does. The pending sends are a term of their own below so that
// when the engine completes its sends as they finish, this test says which term moved.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "cost_model/cluster_spec.h"
#include "cost_model/memory_model.h"
#include "cost_model/model_spec.h"
#include "cost_model/plan.h"
#include "cost_model/train_spec.h"

namespace strata {
namespace {

std::string config(const std::string& kind, const std::string& name) {
  return std::string(STRATA_SOURCE_DIR) + "/configs/" + kind + "/" + name + ".json";
}

TEST(Megatron1tStage, MiddleRankHoldsModelStateInFlightInputsAndEveryPendingSend) {
  const ModelSpec model = ModelSpec::load(config("models", "megatron-1t"));
  const ClusterSpec cluster = ClusterSpec::load(config("clusters", "selene-a100"));
  const TrainSpec train = TrainSpec::load(config("train", "megatron-1t"));
  const Plan plan = Plan::load(config("plans", "megatron-1t"));
  ASSERT_EQ(plan.tp, 8);
  ASSERT_EQ(plan.pp, 64);
  ASSERT_EQ(plan.dp, 6);
  ASSERT_EQ(plan.virtual_stages, 2);
  ASSERT_EQ(plan.micro_batch, 1);
  ASSERT_EQ(train.global_batch, 3072);

  // h = 25600, s = 2048, 128 layers: p v = 128 chunks of one layer each; rank 1 holds
  // layers 1 and 65 and neither the embedding nor the head.
  // A layer on one of t = 8 ranks: 12 h^2 / 8 = 983,040,000 weights, 7 h / 8 = 22,400
  // sharded biases (QKV 3h, fc1 4h), 6 h = 153,600 replicated (proj and fc2 biases, two
  // LayerNorms' weight and bias): 983,216,000. Padded to a multiple of d = 6 (partition.h):
  // 983,216,004; two layers 1,966,432,008 elements.
  constexpr double kElements = 2 * 983'216'004.0;
  // Per element, ZeRO-0 on CUDA (model_state_bytes.h): bf16 params 2 + fp32 master 4 +
  // fp32 gradients 4 + AdamW m, v 4 + 4 = 18 B -> 35,395,776,144 B (32.96 GiB).
  constexpr double kParams = (2 + 4) * kElements, kGradients = 4 * kElements,
                   kOptimizer = 8 * kElements;
  // One message (a layer's input, its output, a gradient between stages): s b h bf16, no
  // SP: 2048 * 25600 * 2 = 104,857,600 B.
  constexpr double kMessage = 2048.0 * 25600 * 2;
  // m = 3072 / (6 * 1) = 512 micro-batches, 1024 forwards and 1024 backwards on the rank.
  // The interleaved warm-up is 2 (p - r - 1) + (v - 1) p = 124 + 64 = 188 forwards, then
  // 836 forward-backward pairs. The peak is the last pair's backward (#835: mb 387, chunk 0;
  // the cool-down's backwards each receive one message and free one, so they tie with it):
  //   in flight: 1024 - 835 = 189 chunk-micro-batches (in_flight_chunks), each holding its
  //              input (full recompute keeps only the input) .............. 189 messages
  //   the output gradient received for that backward ............................ 1 message
  //   the recomputed layer and its backward's working set (layer_backward_peak_bytes with
  //   the CUDA LayerNorm scratch) .................................... 576,913,408 B
  //   sends not yet completed: all 1024 forwards' outputs and the 835 earlier backwards'
  //   input gradients (engine.cc completes them at the step's end) ..... 1859 messages
  constexpr std::int64_t kInFlight = 2 * (64 - 1 - 1) + (2 - 1) * 64 + 1;
  static_assert(kInFlight == 189);
  constexpr double kWorking = 576'913'408.0;
  constexpr double kPendingSends = (1024 + 835) * kMessage;
  // cuBLASLt workspace and the bias-gradient scratch, outside the pool: 32 + 4 MiB.
  constexpr double kWorkspace = 36.0 * 1024 * 1024;
  const double held = kParams + kGradients + kOptimizer + (kInFlight + 1) * kMessage + kWorking;

  const MemoryEstimate e = estimate_memory(model, cluster, train, plan);
  const StageMemory& s = e.stages[1];
  EXPECT_EQ(s.stage_params.total(), 2 * 983'216'000);
  EXPECT_EQ(s.params.device, kParams);
  EXPECT_EQ(s.gradients.device, kGradients);
  EXPECT_EQ(s.optimizer.device, kOptimizer);
  EXPECT_EQ(s.in_flight, kInFlight);
  EXPECT_EQ(s.peak_moment, "backward mb=387 chunk=0: compute layer1");
  EXPECT_EQ(s.activations.device, (kInFlight + 1) * kMessage + kWorking + kPendingSends);
  EXPECT_EQ(s.total.device, held + kPendingSends + kWorkspace);  // 250,863,660,688 B, 233.6 GiB
  // Everything but the pending sends fits an 80 GiB A100 (52.1 GiB): they alone put the
  // plan over on strata's engine.
  EXPECT_LT(held + kWorkspace, cluster.device.memory_bytes);
  EXPECT_GT(held + kPendingSends + kWorkspace, cluster.device.memory_bytes);
  // The middle ranks are alike: each holds the same state and reaches the same count of
  // messages (a later rank has fewer in flight and as many more sends posted).
  EXPECT_EQ(e.worst.device, s.total.device);
}

}  // namespace
}  // namespace strata
