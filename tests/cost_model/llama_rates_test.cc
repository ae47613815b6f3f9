// Llama's operators priced at a Profile's rates for them (compute_model.h): the bytes each
// operator is counted in, a Llama plan's predicted step moving by exactly what a changed
// rate derives, a GPT plan's not moving at all, and the fallbacks when a rate is missing.
#include <gtest/gtest.h>

#include <functional>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/pricing/compute_model.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/profile.h"
#include "cost_model/specs/train_spec.h"
#include "tests/cost_model/bundled_configs.h"

namespace strata {
namespace {

using testing::bundled_cluster;
using testing::bundled_model;
using testing::bundled_train;

// One rank's kernels on its own core (threads 1, no busy-core slowdown, no fed-back scale):
// tiny-tp2's two ranks each get the whole rate (compute share 1 on local-cpu's 2 cores).
Profile llama_profile() {
  Profile p;
  p.machine = "test";
  p.backend = "cpu";
  p.threads_per_rank = 1;
  p.gemm = {{64, 64, 64, 10e9}};
  p.elementwise_bytes_per_s = 4e9;
  p.elementwise_backward_bytes_per_s = 3e9;
  p.attention_flops_per_s = 5e9;
  p.attention_backward_flops_per_s = 6e9;
  p.rmsnorm_bytes_per_s = 8e9;
  p.rmsnorm_backward_bytes_per_s = 7e9;
  p.swiglu_bytes_per_s = 2e9;
  p.swiglu_backward_bytes_per_s = 1.5e9;
  p.rope_bytes_per_s = 3e9;
  p.rope_backward_bytes_per_s = 2.5e9;
  p.gqa_attention = {{16, 4e9, 5e9}, {64, 20e9, 25e9}};
  return p;
}

Prediction predict_tp2(const std::string& model, const Profile& profile) {
  return predict(bundled_model(model), bundled_cluster("local-cpu"), bundled_train("tiny"),
                 Plan::load(std::string(STRATA_SOURCE_DIR) + "/configs/plans/tiny-tp2.json"),
                 &profile);
}

// tiny-llama at b = 1, t = 2, fp32: 64 tokens, h = 64, f/t = 88, 2 query heads and 1 KV head
// of d = 16 on the rank: q and k rotate 2 x 16 + 16 = 48 channels.
TEST(LlamaOpBytes, CountedByHand) {
  const ModelSpec llama = bundled_model("tiny-llama");
  const LlamaOpBytes f = llama_op_bytes(llama, 1, 2, false, 4.0, false);
  EXPECT_DOUBLE_EQ(f.rmsnorm, 64 * 2 * 2 * 64 * 4.0);  // two norms, read and write h: 65536
  EXPECT_DOUBLE_EQ(f.swiglu, 64 * 3 * 88 * 4.0);       // gate, up, product: 67584
  EXPECT_DOUBLE_EQ(f.rope, 64 * 2 * 48 * 4.0);         // read and write q|k: 24576
  const LlamaOpBytes b = llama_op_bytes(llama, 1, 2, false, 4.0, true);
  EXPECT_DOUBLE_EQ(b.rmsnorm, 64 * 2 * 4 * 64 * 4.0);  // dout, inp, dinp read, dinp written
  EXPECT_DOUBLE_EQ(b.swiglu, 64 * 5 * 88 * 4.0);       // gate, up, dout read, dgate, dup written
  EXPECT_DOUBLE_EQ(b.rope, f.rope);
  // Sequence parallelism shards the norms' tokens over t, not the others.
  EXPECT_DOUBLE_EQ(llama_op_bytes(llama, 1, 2, true, 4.0, false).rmsnorm, f.rmsnorm / 2);
  // The three are parts of the layer's memory-bound bytes; GPT has none of them.
  LayerKernels cpu;
  cpu.separate_bias = true;
  EXPECT_GT(layer_elementwise_bytes(llama, 1, 2, false, cpu, 4.0), f.rmsnorm + f.swiglu + f.rope);
  const LlamaOpBytes gpt = llama_op_bytes(bundled_model("tiny"), 1, 2, false, 4.0, true);
  EXPECT_EQ(gpt.rmsnorm + gpt.swiglu + gpt.rope, 0.0);
}

// Doubling one rate of a Llama operator takes half its seconds off every layer, micro-batch
// and step: tiny-llama on tiny-tp2 runs 4 layers x 8 micro-batches (global batch 8, b = 1,
// d = 1) a step, each rank at compute share 1, all of it serial on the CPU backend (the step
// is the sum of its parts). A GPT plan reads none of these rates: not one bit moves.
TEST(LlamaRates, APlanStepMovesByWhatTheRateDerives) {
  const Profile base = llama_profile();
  const Prediction before = predict_tp2("tiny-llama", base);
  const ModelSpec llama = bundled_model("tiny-llama");
  const LlamaOpBytes fwd = llama_op_bytes(llama, 1, 2, false, 4.0, false);
  const LlamaOpBytes bwd = llama_op_bytes(llama, 1, 2, false, 4.0, true);
  constexpr double kLayerPasses = 4.0 * 8.0;
  // Causal FLOPs of the rank's attention: 2 B NH T^2 HS = 2 x 2 x 64^2 x 16 = 262144.
  constexpr double kAttentionFlops = 262144.0;
  struct Case {
    const char* name;
    std::function<void(Profile&)> twice;
    double forward_saved_s;   // a layer pass's forward seconds less, times kLayerPasses
    double backward_saved_s;
  };
  const std::vector<Case> cases = {
      {"rmsnorm", [](Profile& p) { p.rmsnorm_bytes_per_s *= 2; }, fwd.rmsnorm / 16e9, 0.0},
      {"rmsnorm backward", [](Profile& p) { p.rmsnorm_backward_bytes_per_s *= 2; }, 0.0,
       bwd.rmsnorm / 14e9},
      {"swiglu", [](Profile& p) { p.swiglu_bytes_per_s *= 2; }, fwd.swiglu / 4e9, 0.0},
      {"swiglu backward", [](Profile& p) { p.swiglu_backward_bytes_per_s *= 2; }, 0.0,
       bwd.swiglu / 3e9},
      {"rope", [](Profile& p) { p.rope_bytes_per_s *= 2; }, fwd.rope / 6e9, 0.0},
      {"rope backward", [](Profile& p) { p.rope_backward_bytes_per_s *= 2; }, 0.0,
       bwd.rope / 5e9},
      // The head-size-16 sample is tiny-llama's (d = 16); the backward does twice the FLOPs.
      {"gqa", [](Profile& p) { p.gqa_attention[0].flops_per_s *= 2; }, kAttentionFlops / 8e9,
       0.0},
      {"gqa backward", [](Profile& p) { p.gqa_attention[0].backward_flops_per_s *= 2; }, 0.0,
       2 * kAttentionFlops / 10e9},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Profile changed = base;
    c.twice(changed);
    const Prediction after = predict_tp2("tiny-llama", changed);
    const double forward = kLayerPasses * c.forward_saved_s;
    const double backward = kLayerPasses * c.backward_saved_s;
    EXPECT_NEAR(before.parts.forward_s - after.parts.forward_s, forward, 1e-12);
    EXPECT_NEAR(before.parts.backward_s - after.parts.backward_s, backward, 1e-12);
    EXPECT_NEAR(before.step_time_s - after.step_time_s, forward + backward, 1e-12);
    EXPECT_GT(forward + backward, 1e-4 * before.step_time_s);  // a change the bound can see
    const Prediction gpt_before = predict_tp2("tiny", base);
    const Prediction gpt_after = predict_tp2("tiny", changed);
    EXPECT_EQ(gpt_after.step_time_s, gpt_before.step_time_s);
  }
  // The head-size-64 sample is not tiny-llama's: nothing moves.
  Profile other = base;
  other.gqa_attention[1].flops_per_s *= 2;
  other.gqa_attention[1].backward_flops_per_s *= 2;
  EXPECT_EQ(predict_tp2("tiny-llama", other).step_time_s, before.step_time_s);
}

// A profile without the Llama rates prices a Llama layer as before them: every memory-bound
// byte at the elementwise rates, attention at attention_flops_per_s, to the bit. A backward
// without its own rate takes its forward's; grouped-query attention without a backward rate
// twice its forward time.
TEST(LlamaRates, MissingRatesFallBack) {
  const ClusterSpec cpu = bundled_cluster("local-cpu");
  TrainSpec train;
  train.precision = Precision::kFp32;
  LayerKernels kernels;
  kernels.attention = AttentionKernel::kMaterialized;
  kernels.separate_bias = true;
  const ModelSpec llama = bundled_model("tiny-llama");

  Profile old = llama_profile();
  old.rmsnorm_bytes_per_s = old.rmsnorm_backward_bytes_per_s = 0;
  old.swiglu_bytes_per_s = old.swiglu_backward_bytes_per_s = 0;
  old.rope_bytes_per_s = old.rope_backward_bytes_per_s = 0;
  old.gqa_attention.clear();
  DeviceRates rates = device_rates(cpu, train, &old, 2);
  const LayerForward f = layer_forward(llama, 1, 2, false, kernels, rates);
  EXPECT_EQ(f.elementwise_s, layer_elementwise_bytes(llama, 1, 2, false, kernels, 4.0) / 4e9);
  EXPECT_NEAR(f.attention_core_s(), 262144.0 / 5e9, 1e-15);
  const LayerBackward b = layer_backward(llama, 1, 2, false, kernels, rates);
  EXPECT_EQ(b.elementwise_s, layer_backward_elementwise_bytes(llama, 1, 2, false, kernels, 4.0) / 3e9);
  EXPECT_NEAR(b.attention_s, 2 * 262144.0 / 6e9, 1e-15);

  // Forward rates only (a quick calibration): the backward operators at them.
  Profile quick = llama_profile();
  quick.rmsnorm_backward_bytes_per_s = quick.swiglu_backward_bytes_per_s = 0;
  quick.rope_backward_bytes_per_s = 0;
  quick.gqa_attention = {{16, 4e9, 0.0}};
  rates = device_rates(cpu, train, &quick, 2);
  const LlamaOpBytes ops = llama_op_bytes(llama, 1, 2, false, 4.0, true);
  const double rest = layer_backward_elementwise_bytes(llama, 1, 2, false, kernels, 4.0) -
                      ops.rmsnorm - ops.swiglu - ops.rope;
  const LayerBackward q = layer_backward(llama, 1, 2, false, kernels, rates);
  EXPECT_NEAR(q.elementwise_s, rest / 3e9 + ops.rmsnorm / 8e9 + ops.swiglu / 2e9 + ops.rope / 3e9,
              1e-15);
  EXPECT_NEAR(q.attention_s, 2 * 262144.0 / 4e9, 1e-15);  // twice the forward's seconds
}

// The sample nearest the model's head size in log2 (the first of equals); none for a model
// whose every head has its own K and V, or a profile without samples.
TEST(LlamaRates, AttentionSampleNearestTheHeadSize) {
  Profile p;
  p.gqa_attention = {{16, 1e9, 0}, {64, 2e9, 0}, {128, 3e9, 0}};
  ModelSpec m = bundled_model("tiny-llama");  // hidden 64, 4 heads, 2 KV heads: d = 16
  EXPECT_EQ(gqa_attention_sample(m, &p)->head_size, 16);
  m.hidden = 4 * 96;  // d = 96: log2 distance 0.58 to 64, 0.42 to 128
  EXPECT_EQ(gqa_attention_sample(m, &p)->head_size, 128);
  m.hidden = 4 * 32;  // d = 32: 1 from 16 and from 64: the first
  EXPECT_EQ(gqa_attention_sample(m, &p)->head_size, 16);
  m.kv_heads = m.heads;
  EXPECT_EQ(gqa_attention_sample(m, &p), nullptr);
  EXPECT_EQ(gqa_attention_sample(bundled_model("tiny-llama"), nullptr), nullptr);
  const Profile none;
  EXPECT_EQ(gqa_attention_sample(bundled_model("tiny-llama"), &none), nullptr);
}

}  // namespace
}  // namespace strata
