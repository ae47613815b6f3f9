// The time model against published training runs (/work/shared/validation/published_runs.md):
// Narayanan et al. 2021 (arXiv 2104.04473) Table 1, every row within 15% of the published
// TFLOP/s per GPU, and Table 2 (GPT-3 175B) trends: ZeRO-3 without model parallelism falls
// steeply from 384 to 1536 GPUs, PTD-P holds. Prints predicted vs published for each row.
//
// Settings the paper states: selene-a100 cluster, sequence 2048, vocabulary 51,200, mixed
// precision, interleaved 1F1B with scatter/gather, full recomputation. Not published, our
// guesses: micro-batch 1 (the paper's pipeline runs favour b = 1 to keep the bubble small;
// the 1T model at b = 2 would not fit in 80 GB by our memory model), v = 2 chunks per rank
// where p > 1 (p = 1 rows run plain 1F1B: there is nothing to interleave).
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"

namespace strata {
namespace {

ClusterSpec selene() {
  return ClusterSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/clusters/selene-a100.json");
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
  options.published = true;  // Megatron 2021 kernels: materialized attention with dropout
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
  const ClusterSpec cluster = selene();
  const PublishedRun rows[] = {
      {"1.7B", gpt(24, 2304, 24), 1, 1, 32, 1, 1, 512, 0, 137},
      {"7.5B", gpt(32, 4096, 36), 4, 1, 32, 1, 1, 512, 0, 142},
      {"39.1B", gpt(64, 8192, 48), 8, 2, 32, 2, 1, 1536, 0, 138},
      {"145.6B", gpt(96, 12288, 80), 8, 8, 24, 2, 1, 2304, 0, 148},
      {"1008.0B", gpt(160, 25600, 128), 8, 64, 6, 2, 1, 3072, 0, 163},
  };
  for (const PublishedRun& run : rows) {
    const double predicted = predicted_tflops(run, cluster);
    EXPECT_NEAR(predicted, run.published_tflops, 0.15 * run.published_tflops) << run.name;
  }
}

// Table 2, GPT-3 175B (96 layers, hidden 12288, 96 heads), global batch 1536.
TEST(PublishedRuns, Gpt3Table2Trends) {
  const ClusterSpec cluster = selene();
  const ModelSpec gpt3 = gpt(96, 12288, 96);
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
  // ZeRO-3: published 144 -> 44 (x0.31). The model must fall at least 2x (per-GPU compute
  // shrinks 4x while the gathered bytes per GPU stay), land within a factor 1.7 of each
  // published figure, and lose to PTD-P at 1536 GPUs as the paper reports.
  EXPECT_LT(zero3_1536, 0.5 * zero3_384);
  EXPECT_LT(zero3_384, 1.7 * 144);
  EXPECT_GT(zero3_384, 144 / 1.7);
  EXPECT_LT(zero3_1536, 1.7 * 44);
  EXPECT_GT(zero3_1536, 44 / 1.7);
  EXPECT_LT(zero3_1536, ptdp_1536);
}

}  // namespace
}  // namespace strata
