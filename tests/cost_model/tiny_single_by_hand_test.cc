// The numbers behind the goldens, derived by hand: the tiny model's single-rank plan on
// local-cpu, loaded from the same configs the goldens use (configs/models/tiny.json,
// train/tiny.json, plans/tiny-single.json, clusters/local-cpu.json). A golden rewrite
// (STRATA_UPDATE_GOLDEN=1) that moves the parameter count, the peak device memory of a kind
// or MFU's numerator fails here, where the expected value is an independent count.
#include <string>

#include <gtest/gtest.h>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/memory/memory_model.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/step_report.h"
#include "cost_model/specs/train_spec.h"

namespace strata {
namespace {

std::string config(const std::string& relative) {
  return std::string(STRATA_SOURCE_DIR) + "/configs/" + relative;
}

struct TinySingle {
  ModelSpec model = ModelSpec::load(config("models/tiny.json"));
  TrainSpec train = TrainSpec::load(config("train/tiny.json"));
  Plan plan = Plan::load(config("plans/tiny-single.json"));
  ClusterSpec cluster = ClusterSpec::load(config("clusters/local-cpu.json"));
};

// l = 8 layers, h = 64, a = 4 heads, s = 64, V = 256, f = 256 (tiny.json).
// A layer: LayerNorm 1 (gain, bias) 2h + fused QKV 3h^2 + 3h + projection h^2 + h +
// LayerNorm 2 2h + fc1 h f + f + fc2 f h + h = 4h^2 + 2hf + 9h + f
//   = 16384 + 32768 + 576 + 256 = 49984.
// Embedding V h = 16384 (tied with the output layer: counted once) + positions s h = 4096,
// final LayerNorm 2h = 128: P = 8 x 49984 + 16384 + 4096 + 128 = 420480.
TEST(TinySingleByHand, ParameterCount) {
  const TinySingle t;
  EXPECT_EQ(t.model.total_params(), 420480);
}

// Peak device bytes by kind. fp32 training, ZeRO 0, d = 1: params 4 B, gradients 4 B,
// AdamW m and v 8 B a parameter (fp32: the params are the master copy):
//   params 4 x 420480 = 1681920, gradients 1681920, optimizer 3363840 (6727680 together).
// Global batch 8 at b = 1: m = 8 micro-batches; the losses and their scale (m + 1) s b 4 B
// = 9 x 64 x 4 = 2304 B.
// Activations, CPU executor (fp32), b = 1, one stage so one micro-batch in flight (1F1B: F0
// B0 F1 B1 ...). Per layer the saved tensors (memory_model.h's kCpuExecutor list): ln1_in,
// ln1_out, attn_out, ln2_in, ln2_out 5 s b h = 20480 elements, qkv 3 s b h = 12288, the
// logsumexp a s b = 256, fc1_out and gelu_out 2 s b f = 32768, four LayerNorm statistics
// 4 s b = 256: 66048 elements = 264192 B a layer (its input, s b h 16384 B, included).
// The peak is mb 0's forward reaching the final LayerNorm (the head runs before any
// backward frees a layer):
//   token ids and targets 2 s b x 4 B = 512
//   the embedding's output (layer 0's input)               16384
//   8 layers: the saved tensors less the input 247808, plus the output (the next layer's
//     input; the last one's is the final LayerNorm's) 16384: 8 x 264192 = 2113536
//   the head's saved mean, rstd (2 s b x 4 B = 512) and lnf_dout (s b h x 4 B = 16384) 16896
//   the head's working set: lnf_out s b h 4096 + logits s b V 16384 + their gradient 16384
//     + 4 s b statistics 256 = 37120 elements                                      148480
//   = 512 + 16384 + 2113536 + 16896 + 148480 = 2295808.
// Total 6727680 + 2304 + 2295808 = 9025792.
TEST(TinySingleByHand, PeakDeviceMemoryByKind) {
  const TinySingle t;
  const MemoryEstimate e = estimate_memory(t.model, t.cluster, t.train, t.plan);
  ASSERT_EQ(e.stages.size(), 1u);
  const StageMemory& s = e.stages[0];
  EXPECT_DOUBLE_EQ(s.params.device, 1681920);
  EXPECT_DOUBLE_EQ(s.gradients.device, 1681920);
  EXPECT_DOUBLE_EQ(s.optimizer.device, 3363840);
  EXPECT_EQ(s.in_flight, 1);
  EXPECT_DOUBLE_EQ(s.layer_activation_bytes, 264192);
  EXPECT_DOUBLE_EQ(s.activations.device, 2295808);
  EXPECT_DOUBLE_EQ(s.total.device, 9025792);
  EXPECT_DOUBLE_EQ(s.total.host, 0);
  EXPECT_DOUBLE_EQ(s.total.nvme, 0);
  EXPECT_DOUBLE_EQ(e.worst.device, 9025792);
}

// Model FLOPs a step (MFU's numerator, no recomputed forward), counted op by op rather than
// from docs/cost-model.md's closed form 72 B s l h^2 (1 + s/(6h) + V/(12 l h)). Forward, per token:
// a layer's GEMMs 2 x (3h^2 + h^2 + 2hf) = 2 x (12288 + 4096 + 32768) = 98304 FLOPs, its
// attention Q K^T and probs x V 2 x 2 s h = 16384; the logits 2 h V = 32768. Backward twice
// the forward: x 3. Per token 3 x (8 x (98304 + 16384) + 32768) = 3 x 950272 = 2850816;
// B s = 8 x 64 = 512 tokens: 1459617792 FLOPs.
// MFU: those FLOPs over the predicted step, over the peak of the cores a rank keeps busy:
// local-cpu's 0.2 TFLOP/s a core, one thread per rank without a profile: 1 core.
TEST(TinySingleByHand, ModelFlopsAndMfu) {
  const TinySingle t;
  const double flops = 1459617792.0;
  EXPECT_NEAR(model_flops_without_recompute(t.model, t.train.global_batch), flops, 1e-12 * flops);
  const Prediction p = predict(t.model, t.cluster, t.train, t.plan);
  ASSERT_GT(p.step_time_s, 0);
  EXPECT_NEAR(p.model_tflops_per_gpu, flops / p.step_time_s / 1e12, 1e-9 * p.model_tflops_per_gpu);
  EXPECT_NEAR(p.mfu, flops / p.step_time_s / 0.2e12, 1e-9 * p.mfu);
}

}  // namespace
}  // namespace strata
