// The time model against published training runs (/work/shared/validation/published_runs.md),
// predicted vs published printed for every row:
//  - Narayanan et al. 2021 (arXiv 2104.04473) Table 1: every row within 15% of the published
//    TFLOP/s per GPU (selene-a100).
//  - Same paper, Table 2, GPT-3 175B: PTD-P within 15% / 20%; ZeRO-3 without model
//    parallelism within 15%, by mechanism (the Program's published conventions: a layer
//    gathered for its forward, again for its recomputation and again for its backward, each
//    gather and reduce-scatter an op of one comm stream, the link), and the steep fall from
//    384 to 1536 GPUs.
//  - ZeRO-Offload (Ren et al. 2021) on one V100 32 GB and ZeRO-Infinity (Rajbhandari et al.
//    2021) on 512 V100 (dgx2-v100), with the bounds argued at each test.
//
// Settings the Megatron paper states: selene-a100 cluster, sequence 2048, vocabulary 51,200,
// mixed precision, interleaved 1F1B with scatter/gather, full recomputation. Not published,
// our guesses: micro-batch 1 (the paper's pipeline runs favour b = 1 to keep the bubble
// small; the 1T model at b = 2 would not fit in 80 GB by our memory model), v = 2 chunks per
// rank where p > 1 (p = 1 rows run plain 1F1B: there is nothing to interleave). Model shapes
// come from configs/models/ (megatron-*.json, gpt3-175b.json).
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/memory/memory_model.h"
#include "cost_model/specs/model_spec.h"
#include "tests/cost_model/bundled_configs.h"

namespace strata {
namespace {

using testing::bundled_cluster;

ModelSpec model_config(const std::string& name) {
  return ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/" + name + ".json");
}

ModelSpec gpt(std::int64_t heads, std::int64_t hidden, std::int64_t layers) {
  ModelSpec m;
  m.name = "gpt";
  m.heads = heads;
  m.hidden = hidden;
  m.layers = layers;
  m.seq_len = 2048;
  m.vocab = 51200;
  m.ffn_hidden = 4 * hidden;
  return m;
}

struct PublishedRun {
  const char* name;
  ModelSpec model;
  std::int64_t t, p, d, v, b, global_batch;
  int zero_stage;
  double published_tflops;  // per GPU, from the paper's table
};

double predicted_tflops(const PublishedRun& run, const ClusterSpec& cluster) {
  TrainSpec train;
  train.global_batch = run.global_batch;
  train.steps = 1;
  Plan plan;
  plan.tp = run.t;
  plan.pp = run.p;
  plan.dp = run.d;
  plan.virtual_stages = run.v;
  plan.micro_batch = run.b;
  plan.schedule = run.v > 1 ? ScheduleKind::kInterleaved : ScheduleKind::kOneFOneB;
  plan.recompute = Recompute::kFull;
  plan.zero_stage = run.zero_stage;
  CostModelOptions options;
  options.conventions = megatron_lm_2021_conventions();  // materialized attention with dropout
  const Prediction p = predict(run.model, cluster, train, plan, nullptr, options);
  std::printf("%-28s t%-2lld p%-3lld d%-5lld b%lld v%lld: predicted %6.1f TFLOP/s, published %5.1f "
              "(%+5.1f%%), step %.2f s, bubble %.1f%%, device %.1f GiB\n",
              run.name, static_cast<long long>(run.t), static_cast<long long>(run.p),
              static_cast<long long>(run.d), static_cast<long long>(run.b),
              static_cast<long long>(run.v), p.tflops_per_gpu, run.published_tflops,
              100.0 * (p.tflops_per_gpu / run.published_tflops - 1.0), p.step_time_s,
              100.0 * p.bubble_fraction, p.memory_bytes.device / (1024.0 * 1024.0 * 1024.0));
  std::printf("    parts (s): fwd %.2f bwd %.2f recompute %.2f tp %.2f pp %.2f dp %.2f "
              "offload %.2f optimizer %.2f bubble %.2f\n",
              p.parts.forward_s, p.parts.backward_s, p.parts.recompute_s, p.parts.tp_comm_s,
              p.parts.pp_comm_s, p.parts.dp_comm_s, p.parts.offload_s, p.parts.optimizer_s,
              p.parts.bubble_s);
  return p.tflops_per_gpu;
}

// Table 1 (params, heads, hidden, layers, t, p, d, global batch, TFLOP/s per GPU).
TEST(PublishedRuns, MegatronTable1WithinFifteenPercent) {
  const ClusterSpec cluster = bundled_cluster("selene-a100");
  const PublishedRun rows[] = {
      {"1.7B", model_config("megatron-1.7b"), 1, 1, 32, 1, 1, 512, 0, 137},
      {"7.5B", model_config("megatron-7.5b"), 4, 1, 32, 1, 1, 512, 0, 142},
      {"39.1B", model_config("megatron-39.1b"), 8, 2, 32, 2, 1, 1536, 0, 138},
      {"145.6B", model_config("megatron-145.6b"), 8, 8, 24, 2, 1, 2304, 0, 148},
      {"1008.0B", model_config("megatron-1t"), 8, 64, 6, 2, 1, 3072, 0, 163},
  };
  for (const PublishedRun& run : rows) {
    const double predicted = predicted_tflops(run, cluster);
    EXPECT_NEAR(predicted, run.published_tflops, 0.15 * run.published_tflops) << run.name;
  }
}

// Table 2, GPT-3 175B (96 layers, hidden 12288, 96 heads), global batch 1536.
TEST(PublishedRuns, Gpt3Table2Trends) {
  const ClusterSpec cluster = bundled_cluster("selene-a100");
  const ModelSpec gpt3 = model_config("gpt3-175b");
  // ZeRO-3, no model parallelism: 384 GPUs at micro-batch 4 (144), 1536 GPUs at b = 1 (44).
  const double zero3_384 =
      predicted_tflops({"175B ZeRO-3 384 GPUs", gpt3, 1, 1, 384, 1, 4, 1536, 3, 144}, cluster);
  const double zero3_1536 =
      predicted_tflops({"175B ZeRO-3 1536 GPUs", gpt3, 1, 1, 1536, 1, 1, 1536, 3, 44}, cluster);
  // PTD-P t = 8, p = 12: 153 on 384 GPUs (d = 4), 141 on 1536 (d = 16); v = 2, b = 1 guessed.
  const double ptdp_384 =
      predicted_tflops({"175B PTD-P 384 GPUs", gpt3, 8, 12, 4, 2, 1, 1536, 0, 153}, cluster);
  const double ptdp_1536 =
      predicted_tflops({"175B PTD-P 1536 GPUs", gpt3, 8, 12, 16, 2, 1, 1536, 0, 141}, cluster);

  // PTD-P: within the Table 1 bound, and it degrades (more bubble, more DP) but by < 15%.
  EXPECT_NEAR(ptdp_384, 153, 0.15 * 153);
  EXPECT_NEAR(ptdp_1536, 141, 0.20 * 141);
  EXPECT_LT(ptdp_1536, ptdp_384);
  EXPECT_GT(ptdp_1536, 0.85 * ptdp_384);
  // ZeRO-3: published 144 and 44. The step is the Program replayed (cost_model.h): per layer
  // a gather g for its forward f, prefetched a step ahead, and for its backward c (the
  // recomputation included) one prefetched and one on demand, plus its reduce-scatter (g:
  // the same bytes), all on the rank's comm stream. The forward takes max(f, g) a layer; the
  // backward's compute waits for the previous layer's reduce-scatter and its own regather,
  // the next prefetch running under it: max(c + 2g, 3g) a layer (worked by hand in
  // program_simulator_test). DeepSpeed's reduction stream of its own, sharing the link, would
  // give the same times (program.h, "Streams and order").
  //   384 GPUs, micro-batch 4: g ~ f ~ 0.15 s, c ~ 0.44 s > g: 96 (f + c + 2g) ~ 85 s, 138
  //     (-4%).
  //   1536 GPUs, micro-batch 1: f ~ 0.04 s, c ~ 0.11 s < g ~ 0.15 s: the link paces the step,
  //     96 x 4g ~ 59 s, 50 (+13%): the published run was 13% slower than its link allowed.
  EXPECT_NEAR(zero3_384, 144, 0.15 * 144);
  EXPECT_NEAR(zero3_1536, 44, 0.15 * 44);
  // The fall (published x0.31): per-GPU compute shrinks 4x while the gathered bytes per GPU
  // per micro-batch stay; and ZeRO-3 loses to PTD-P at 1536 GPUs as the paper reports.
  EXPECT_LT(zero3_1536, 0.4 * zero3_384);
  EXPECT_LT(zero3_1536, ptdp_1536);
}

// ---- DGX-2 (V100 32 GB) runs -------------------------------------------------------------

ClusterSpec dgx2() {
  return ClusterSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/clusters/dgx2-v100.json");
}

struct OffloadRun {
  const char* name;
  ModelSpec model;
  Plan plan;
  std::int64_t global_batch;
  double published_tflops;
};

Prediction predict_run(const OffloadRun& run, const ClusterSpec& cluster) {
  TrainSpec train;
  train.global_batch = run.global_batch;
  train.steps = 1;
  // The published runs clipped gradients at 1.0 (Megatron-LM's default, which DeepSpeed's
  // examples keep), so their CPU optimizer stepped after the whole backward, in the tail.
  train.optimizer.grad_clip = 1.0;
  CostModelOptions options;
  options.conventions = megatron_lm_2021_conventions();
  const Prediction p = predict(run.model, cluster, train, run.plan, nullptr, options);
  std::printf("%-28s %s: predicted %6.1f TFLOP/s, published %5.1f (%+5.1f%%), step %.2f s, "
              "device %.1f GiB\n",
              run.name, run.plan.label().c_str(), p.tflops_per_gpu, run.published_tflops,
              100.0 * (p.tflops_per_gpu / run.published_tflops - 1.0), p.step_time_s,
              p.memory_bytes.device / (1024.0 * 1024.0 * 1024.0));
  std::printf("    parts (s): fwd %.2f bwd %.2f recompute %.2f tp %.2f dp %.2f offload %.2f "
              "optimizer %.2f\n",
              p.parts.forward_s, p.parts.backward_s, p.parts.recompute_s, p.parts.tp_comm_s,
              p.parts.dp_comm_s, p.parts.offload_s, p.parts.optimizer_s);
  return p;
}

// ZeRO-Offload (Ren et al. 2021): a 10B model on one V100 32 GB with the optimizer state
// and the gradients in CPU memory reaches about 40 TFLOP/s. Shape: 50 layers, hidden 4096
// (12 l h^2 = 10.1e9 parameters), 32 heads, sequence 1024, GPT-2 vocabulary 50,257; batch 10
// per GPU, one micro-batch, full recomputation (our reading of the paper's setup; heads and
// sequence are our guesses and barely move the result).
TEST(PublishedRuns, ZeroOffloadTenBillionOnOneV100) {
  const ClusterSpec cluster = dgx2();
  ModelSpec m = gpt(32, 4096, 50);
  m.name = "gpt-10b";
  m.seq_len = 1024;
  m.vocab = 50257;
  TrainSpec train;
  train.global_batch = 10;
  train.steps = 1;
  Plan plan;
  plan.micro_batch = 10;
  plan.recompute = Recompute::kFull;

  // It fits on the 32 GB device only with offload: 16 bytes/param of model state on the
  // device is 161 GB; with the optimizer state and gradients on the host the device keeps the
  // 2-byte parameters (20 GB) plus activations and buffers.
  const double capacity = cluster.device.memory_bytes;
  EXPECT_GT(estimate_memory(m, cluster, train, plan).worst.device, capacity);
  plan.zero_stage = 2;  // d = 1: partitioning alone saves nothing
  EXPECT_GT(estimate_memory(m, cluster, train, plan).worst.device, capacity);
  plan.offload.optimizer = OffloadTier::kCpu;
  plan.offload.gradients = OffloadTier::kCpu;
  EXPECT_LT(estimate_memory(m, cluster, train, plan).worst.device, capacity);

  const Prediction p = predict_run({"10B ZeRO-Offload 1 V100", m, plan, 10, 40}, cluster);
  // Offload terms by hand (dgx2-v100.json): CPU AdamW on all P parameters, 30 bytes/param
  // over the node's 256 GB/s (one GPU has the host to itself); the updated bf16 params come
  // back over 12 GB/s PCIe in the optimizer steps, exposed. Each layer's gradient goes down
  // right after its backward (the Program's offload_grads, on the copy stream), hidden
  // behind the next layer's backward but for the last layer's: it runs beside the
  // embedding's backward only (2 x its 5 b s h bytes over 900 GB/s x 0.8); the embedding's
  // goes down in the tail, exposed. (The closed form before counted the last 25 MB bucket
  // instead of the last unit: 1.715 s, now 1.781 s.) The embedding's rows are padded to a
  // multiple of 128 on CUDA (backend_facts.h; Megatron's --make-vocab-size-divisible-by 128
  // alike): 50,304 rows, 47 x 4096 parameters more, stepped and moved like the others.
  const double padding = 47.0 * 4096;
  const double params = static_cast<double>(m.total_params()) + padding;
  EXPECT_NEAR(p.parts.optimizer_s, params * 30.0 / 256e9, 1e-9);
  const double layer_down = 2.0 * static_cast<double>(m.params_per_layer()) / 12e9;
  const double embedding_down = 2.0 * (static_cast<double>(m.embedding_params()) + padding) / 12e9;
  const double embedding_backward = 2.0 * 10 * 1024 * 5.0 * 4096 * 2 / (900e9 * 0.8);
  EXPECT_NEAR(p.parts.offload_s,
              2.0 * params / 12e9 + (layer_down - embedding_backward) + embedding_down, 1e-9);
  // Throughput bound: [1.0, 1.6] x published. Without a V100 Profile the compute runs on the
  // default GEMM curve (kGemmPeakEfficiency from A100/H100 cuBLAS), ~60% of peak for these
  // shapes, while the V100-era PyTorch stack sustained about 30% of peak on one GPU with no
  // offload and no communication at all (Shoeybi et al. 2019, Megatron-LM: a 39 TFLOP/s
  // single-V100 baseline). So the prediction must not fall below the published figure (the
  // offload costs are not underestimated away), and may exceed it by the compute model's
  // known optimism on this software, but not by more than ~60%.
  // FROZEN at e7b0168 (predicted 60.6, 1.52x): this bound may tighten, never widen. A model
  // change that leaves it is a finding to explain in the commit, not a bound to move.
  EXPECT_GE(p.tflops_per_gpu, 40.0);
  EXPECT_LE(p.tflops_per_gpu, 1.6 * 40.0);
}

// ZeRO-Infinity (Rajbhandari et al. 2021): 25 PFLOP/s on 512 V100 (32 DGX-2), about 49
// TFLOP/s per GPU, for models around a trillion parameters with the model state offloaded.
// Shape: the 1T model of configs/models/megatron-1t.json (h = 25600, 128 layers). Plan, our
// guesses: t = 4 inside a node, d = 128, ZeRO-3 with optimizer state, gradients and
// parameters in CPU memory, full recomputation, one micro-batch per step. The per-GPU batch
// is not in our notes and decides the result (traffic per step is fixed, compute grows with
// b): b = 1 cannot reach the figure, so we check b = 4 within 25% and the trend in b. A
// consistency check, not a validation: at b = 4 the activation checkpoints (2 s b h per layer)
// need more than 32 GB, which ZeRO-Infinity offloads to CPU and our memory model does not.
TEST(PublishedRuns, ZeroInfinityOnFiveHundredTwelveV100) {
  const ClusterSpec cluster = dgx2();
  const ModelSpec m = model_config("megatron-1t");
  const auto run = [&](std::int64_t b) {
    Plan plan;
    plan.tp = 4;
    plan.dp = 128;
    plan.micro_batch = b;
    plan.zero_stage = 3;
    plan.offload.optimizer = OffloadTier::kCpu;
    plan.offload.gradients = OffloadTier::kCpu;
    plan.offload.params = OffloadTier::kCpu;
    plan.recompute = Recompute::kFull;
    return predict_run({"1T ZeRO-Infinity 512 V100", m, plan, 128 * b, 49}, cluster);
  };
  const Prediction b1 = run(1);
  const Prediction b4 = run(4);
  // 25% bound: the guessed batch, the compute curve's V100 optimism (ZeRO-Offload test) and
  // the per-GPU share of the node's network (6.25 GB/s, pessimistic for a DP group holding
  // every GPU of a node) pull in opposite directions by unknown amounts. (While a layer's
  // on-demand regather queued behind the next layer's prefetch, as in the GPT-3 ZeRO-3 rows
  // above, this was 35.6, -27%, and held to 30%; now 42.8, -13%.)
  // FROZEN at e7b0168 (predicted 42.8, -12.7%): this bound may tighten, never widen. A model
  // change that leaves it is a finding to explain in the commit, not a bound to move.
  EXPECT_NEAR(b4.tflops_per_gpu, 49.0, 0.25 * 49.0);
  // Traffic-bound at b = 1: ZeRO-3's gathers take most of the step.
  EXPECT_GT(b1.parts.dp_comm_s, 0.5 * b1.step_time_s);
  EXPECT_GT(b4.tflops_per_gpu, 2.0 * b1.tflops_per_gpu);
}

}  // namespace
}  // namespace strata
