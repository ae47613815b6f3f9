// What a pipeline stage of the published 1T plan (t8 p64 d6 v2, interleaved 1F1B, full
// recompute, no SP: configs/plans/megatron-1t.json) holds on strata's CUDA engine, derived by
// hand and checked against the memory model's Program walk (estimate_memory on selene-a100).
//
// The walk is the engine to the byte (tests/executor/cuda_pool_prediction_test.cc replays
// the real Engine on the pool recorder), so the figures below are what strata's engine
// asks for. Megatron-LM trained this plan on 80 GiB A100s. The engine completes a pipeline
// send at the first receive that proves the peer has it (program.h, "Send completion"), so
// a rank holds the sends of its warm-up, which no backward message can prove yet, and a few
// after: the stage fits in 70.5 GiB, the first stage (with the embedding) in 74.5 GiB.
// (Before, every send was kept to the step's end: 1859 pending messages, 233.6 GiB.)
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/memory/memory_model.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/train_spec.h"

namespace strata {
namespace {

std::string config(const std::string& kind, const std::string& name) {
  return std::string(STRATA_SOURCE_DIR) + "/configs/" + kind + "/" + name + ".json";
}

TEST(Megatron1tStage, ARankHoldsModelStateInFlightInputsAndItsWarmUpsSends) {
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
  // Every rank runs the forwards in one order; rank r's warm-up is
  // W_r = 2 (p - r - 1) + (v - 1) p forwards: W_1 = 124 + 64 = 188, then pairs F(W + k),
  // B(k). Each forward receives its input from rank 0 and sends its output to rank 2.
  // What proves a forward send complete is a backward message from rank 2, which sends its
  // B(k) after its F(W_2 + k) (W_2 = W_1 - 2): rank 1's receive of B(k) proves its
  // forwards 0..W_1 - 2 + k complete. Before B(0) arrives nothing is proved: at F(W_1), the
  // last forward before it, rank 1 holds the outputs of F(0..W_1 - 1) as pending sends.
  // (Backward sends: none yet. In the steady phase a receive of each direction proves all
  // but the last few sends; the cool-down's backward sends, which no forward message
  // proves, pile up as the warm-up's did, but each replaces an input freed by its backward.)
  // The peak is F(W_1) (k = 188: micro-batch 64 + 188 % 64 = 124, chunk 0), at its layer's
  // forward:
  //   in flight: W_1 + 1 = 189 chunk-micro-batches (in_flight_chunks), each holding its
  //              input (full recompute keeps only the input) ................ 189 messages
  //   the pending sends of F(0..187) ........................................ 188 messages
  //   the layer's output (the next send) ......................................  1 message
  //   the layer forward's transient, its fc2 partial beside everything it makes
  //   (layer_forward_extra_bytes, phases of gpt_layer.cc; t > 1, no SP, nothing kept):
  //   ln1 2 x 8,192 + 104,857,600, qkv 39,321,600, attention 163,840 + 13,107,200,
  //   ln2 104,857,600 + 2 x 8,192 + 104,857,600, fc1 and GeLU 2 x 52,428,800: 472,055,808,
  //   + the fc2 partial 104,857,600 ................................... 576,913,408 B
  // The receive of B(0) right after holds 189 + 189 + 1 messages (39.7 GB), less than this
  // moment's 378 messages and transient (40.2 GB); each steady pair's moments sit below both.
  constexpr std::int64_t kWarmUp = 2 * (64 - 1 - 1) + (2 - 1) * 64;
  static_assert(kWarmUp == 188);
  constexpr std::int64_t kInFlight = kWarmUp + 1;
  constexpr double kForwardExtra = 576'913'408.0;
  constexpr double kPendingSends = kWarmUp * kMessage;  // 19,713,228,800 B, 18.4 GiB
  // cuBLASLt workspace and the bias-gradient scratch, outside the pool: 32 + 4 MiB.
  constexpr double kWorkspace = 36.0 * 1024 * 1024;
  constexpr double kState = kParams + kGradients + kOptimizer;
  const double activations = (kInFlight + 1) * kMessage + kForwardExtra + kPendingSends;

  const MemoryEstimate e = estimate_memory(model, cluster, train, plan);
  const StageMemory& s = e.stages[1];
  EXPECT_EQ(s.stage_params.total(), 2 * 983'216'000);
  EXPECT_EQ(s.params.device, kParams);
  EXPECT_EQ(s.gradients.device, kGradients);
  EXPECT_EQ(s.optimizer.device, kOptimizer);
  EXPECT_EQ(s.in_flight, kInFlight);
  EXPECT_EQ(s.peak_moment, "forward mb=124 chunk=0: compute layer1");
  EXPECT_EQ(s.activations.device, activations);  // 40,213,086,208 B
  EXPECT_EQ(s.total.device, kState + activations + kWorkspace);  // 75,646,611,088 B, 70.45 GiB

  // Rank 0 holds more: the embedding (the wte shard 51200 / 8 x 25600 = 163,840,000 and wpe
  // 2048 x 25600 = 52,428,800; 216,268,800, a multiple of 6) at 18 B, a warm-up of
  // W_0 = 190 (peak at F(190): micro-batch 126, chunk 0), and the token ids (2048 int32,
  // 8,192 B) of the 127 chunk-0 forwards among its 191 in flight (k in 0..63 and 128..190).
  // Chunk 0's forward has the embedding before the layer: its output is the layer's input,
  // held as the others' received inputs are.
  constexpr double kState0 = 18 * (kElements + 216'268'800.0);
  constexpr std::int64_t kWarmUp0 = 2 * (64 - 0 - 1) + (2 - 1) * 64;
  static_assert(kWarmUp0 == 190);
  const double activations0 =
      (kWarmUp0 + 1 + kWarmUp0 + 1) * kMessage + 127 * 8192.0 + kForwardExtra;
  const StageMemory& s0 = e.stages[0];
  EXPECT_EQ(s0.peak_moment, "forward mb=126 chunk=0: compute layer0");
  EXPECT_EQ(s0.activations.device, activations0);  // 40,633,556,992 B
  EXPECT_EQ(s0.total.device, kState0 + activations0 + kWorkspace);  // 79,959,920,272 B, 74.47 GiB
  EXPECT_EQ(e.worst.device, s0.total.device);
  EXPECT_EQ(e.worst_pp_rank, 0);

  // Both fit Megatron's 80 GiB A100s, with 5.5 GiB (rank 0) and 9.5 GiB (rank 1) to spare.
  // What a rank holds beyond Megatron's is the warm-up's pending sends (18.4 GiB on rank 1):
  // Megatron frees a send's output once its batched p2p has been waited for; without them
  // rank 1 holds 52.1 GiB.
  EXPECT_EQ(cluster.device.memory_bytes, 80.0 * 1024 * 1024 * 1024);
  EXPECT_LT(e.worst.device, cluster.device.memory_bytes);
  EXPECT_LT(s.total.device - kPendingSends, 52.2 * 1024 * 1024 * 1024);
}

}  // namespace
}  // namespace strata
