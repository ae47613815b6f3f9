// The calibration library: timing medians, the alpha-beta fit on synthetic points, the
// model's GEMM shapes (GPT's and Llama's), sample merging, and a quick compute calibration of
// the tiny model producing a Profile with positive rates (Llama's operators' included) that
// round-trips through JSON; the conversion of measured seconds into the Profile's units both
// backends share (compute_profile), the
// layers a calibration times with their CUDA epilogues, and the CUDA calibration's option
// checks (which need no GPU).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "cost_model/pricing/compute_model.h"
#include "cost_model/specs/conventions.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/model_spec.h"
#include "executor/calibrate/calibration.h"
#include "executor/calibrate/last_level_cache.h"
#include "executor/calibrate/llama_op_bench.h"
#include "executor/calibrate/collective_bench.h"
#include "executor/calibrate/compute_bench.h"
#include "executor/calibrate/compute_profile.h"
#include "executor/calibrate/gpu_options.h"
#include "executor/calibrate/node_collectives.h"
#include "executor/calibrate/timing.h"

namespace strata::calibrate {
namespace {

ModelSpec bundled_model(const std::string& name) {
  return ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/" + name + ".json");
}

TEST(Timing, MedianOfOddAndEvenCounts) {
  EXPECT_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);  // mean of the middle two, 2 and 3
  EXPECT_THROW(median({}), std::invalid_argument);
}

TEST(Timing, OneWarmupThenRepeats) {
  int calls = 0;
  // min_repeat_s = 0: every repeat is a single call, so 1 warm-up + 3 repeats = 4 calls.
  const double s = median_call_seconds([&] { ++calls; }, TimingOptions{3, 0.0});
  EXPECT_EQ(calls, 4);
  EXPECT_GE(s, 0.0);
}

TEST(FitAlphaBeta, RecoversAnExactLine) {
  // t = 10 us + x / (5 GB/s) at three sizes; least squares through exact points is exact.
  const double alpha = 10e-6, bw = 5e9;
  std::vector<std::pair<double, double>> points;
  for (double x : {1e3, 1e6, 1e7}) points.emplace_back(x, alpha + x / bw);
  const AlphaBeta fit = fit_alpha_beta(points);
  EXPECT_NEAR(fit.latency_s, alpha, 1e-12);
  EXPECT_NEAR(fit.bus_bandwidth_bytes_per_s / bw, 1.0, 1e-9);
}

TEST(FitAlphaBeta, SmallMessagesPinTheLatency) {
  // t = 10 us + x / (5 GB/s), the 10 MB point 5% slow (noise). Relative weights keep the
  // latency at 9.98 us (worked with the 1/t^2-weighted normal equations); an unweighted fit
  // of the same points gives 5.02 us, half the truth, because the 100 us of noise on the
  // largest point moves the intercept.
  const AlphaBeta fit =
      fit_alpha_beta({{1e3, 10.2e-6}, {1e6, 210e-6}, {1e7, 2010e-6 * 1.05}});
  EXPECT_NEAR(fit.latency_s, 9.984e-6, 0.01e-6);
  EXPECT_NEAR(fit.bus_bandwidth_bytes_per_s, 4.878e9, 0.001e9);
}

TEST(FitAlphaBeta, NoisyNonPositiveSlopeFallsBack) {
  // Bigger message measured faster (noise): slope < 0. Bandwidth = largest x / its t =
  // 1e6 B / 1e-3 s = 1e9 B/s; latency = smallest message's time, 2e-3 s.
  const AlphaBeta fit = fit_alpha_beta({{1e3, 2e-3}, {1e6, 1e-3}});
  EXPECT_DOUBLE_EQ(fit.bus_bandwidth_bytes_per_s, 1e9);
  EXPECT_DOUBLE_EQ(fit.latency_s, 2e-3);
  EXPECT_THROW(fit_alpha_beta({{1e3, 1e-3}}), std::invalid_argument);
  EXPECT_THROW(fit_alpha_beta({{1e3, 1e-3}, {1e3, 2e-3}}), std::invalid_argument);
}

TEST(ModelShapes, Gpt2LinearLayers) {
  // GPT-2 124M: C = 768, F = 3072, V = 50257, seq 1024; micro-batch 2 -> BT = 2048.
  const std::vector<LinearShape> s = model_linear_shapes(bundled_model("gpt2-124m"), 2, 1);
  ASSERT_EQ(s.size(), 5u);
  const std::vector<std::tuple<std::string, std::int64_t, std::int64_t, std::int64_t>> want = {
      {"qkv", 2048, 768, 2304},  // 3C
      {"proj", 2048, 768, 768},
      {"fc1", 2048, 768, 3072},
      {"fc2", 2048, 3072, 768},
      {"logits", 2048, 768, 50257}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(s[i].name, std::get<0>(want[i]));
    EXPECT_EQ(s[i].BT, std::get<1>(want[i]));
    EXPECT_EQ(s[i].C, std::get<2>(want[i]));
    EXPECT_EQ(s[i].OC, std::get<3>(want[i]));
  }
  EXPECT_FALSE(s[4].bias);  // tied output layer
}

TEST(ModelShapes, TensorParallelSplitsAndRejectsNonDivisors) {
  // tiny: C = 64, F = 256, V = 256, heads 4; t = 2 halves 3C, the proj input, F and V.
  const std::vector<LinearShape> s = model_linear_shapes(bundled_model("tiny"), 1, 2);
  EXPECT_EQ(s[0].OC, 96);   // 3 * 64 / 2
  EXPECT_EQ(s[1].C, 32);    // 64 / 2
  EXPECT_EQ(s[2].OC, 128);  // 256 / 2
  EXPECT_EQ(s[3].C, 128);
  EXPECT_EQ(s[4].OC, 128);
  // 50257 is odd: no vocabulary split over 4 ranks.
  EXPECT_THROW(model_linear_shapes(bundled_model("gpt2-124m"), 1, 4), ConfigError);
}

TEST(ModelShapes, LlamaLayersAtTheirOwnWidthsWithoutBiasesOrGelu) {
  // tiny-llama: C = 64, 4 heads of 16 sharing 2 KV heads, F = 176 (gate and up each), V = 256.
  std::vector<LinearShape> s = model_linear_shapes(bundled_model("tiny-llama"), 1, 1);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0].OC, 64 + 2 * 2 * 16);  // q, then k and v of 2 KV heads: 128
  EXPECT_EQ(s[1].C, 64);
  EXPECT_EQ(s[2].OC, 2 * 176);          // gate|up
  EXPECT_EQ(s[3].C, 176);
  EXPECT_EQ(s[4].OC, 256);
  for (const LinearShape& l : s) {
    EXPECT_FALSE(l.bias) << l.name;
    EXPECT_FALSE(l.gelu_epilogue || l.dgelu_epilogue) << l.name;  // SwiGLU runs on its own
  }
  EXPECT_TRUE(s[3].residual_epilogue);
  // t = 2: one KV head a rank, 2 query heads: 32 + 2 x 16 = 64; gate|up 176, fc2's input 88.
  s = model_linear_shapes(bundled_model("tiny-llama"), 1, 2);
  EXPECT_EQ(s[0].OC, 64);
  EXPECT_EQ(s[2].OC, 176);
  EXPECT_EQ(s[3].C, 88);
}

TEST(GemmSamples, OnePerShapeSortedTotalFlopsOverTotalTime) {
  GemmMeasurement a, b, c;
  a.m = 64, a.n = 256, a.k = 64, a.seconds = 1.0;  // 2*64*256*64 = 2097152 FLOPs each
  b = a;
  b.seconds = 3.0;
  c.m = 64, c.n = 64, c.k = 64, c.seconds = 0.5;  // 524288 FLOPs
  const std::vector<GemmSample> s = gemm_samples({a, c, b});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].n, 64);  // (64, 64, 64) sorts first
  EXPECT_DOUBLE_EQ(s[0].flops_per_s, 524288.0 / 0.5);
  EXPECT_EQ(s[1].n, 256);
  EXPECT_DOUBLE_EQ(s[1].flops_per_s, 2.0 * 2097152.0 / 4.0);  // two calls over 1 + 3 s
}

TEST(MeasureLinear, PassShapesFollowTheTimeModelsConvention) {
  const LinearShape layer{"fc1", 32, 16, 48, true};
  const TimingOptions quick{1, 0.0};
  const GemmMeasurement f = measure_linear(layer, GemmPass::kForward, quick);
  EXPECT_EQ(std::tuple(f.m, f.n, f.k), std::tuple(32, 48, 16));  // (BT, OC, C)
  const GemmMeasurement bi = measure_linear(layer, GemmPass::kBackwardInput, quick);
  EXPECT_EQ(std::tuple(bi.m, bi.n, bi.k), std::tuple(32, 16, 48));  // (BT, C, OC)
  const GemmMeasurement bw = measure_linear(layer, GemmPass::kBackwardWeight, quick);
  EXPECT_EQ(std::tuple(bw.m, bw.n, bw.k), std::tuple(48, 16, 32));  // (OC, C, BT)
  for (const GemmMeasurement& g : {f, bi, bw}) {
    EXPECT_DOUBLE_EQ(g.flops(), 2.0 * 32 * 16 * 48);
    EXPECT_GT(g.flops_per_s(), 0.0);
  }
}

TEST(CalibrateCompute, QuickTinyProfileHasPositiveRatesAndRoundTrips) {
  ComputeCalibrationOptions options = compute_options({bundled_model("tiny")}, /*quick=*/true);
  set_memory_working_set(options, 1 << 22);  // keep the test short
  options.kernel_threads = 1;  // one rank's share; AdamW "all cores" at 2
  options.adam_threads = 2;
  omp_set_num_threads(3);  // the caller's setting, restored afterwards
  std::vector<double> fractions;
  const Profile p = calibrate_compute(
      options, [&](double f, const std::string&) { fractions.push_back(f); });
  EXPECT_EQ(p.backend, "cpu");
  EXPECT_FALSE(p.machine.empty());
  // tiny's forward GEMMs (m, n, k): qkv (64, 192, 64), proj (64, 64, 64), fc1 (64, 256, 64),
  // fc2 (64, 64, 256), logits (64, 256, 64) = fc1's shape: 4 distinct samples.
  ASSERT_EQ(p.gemm.size(), 4u);
  for (const GemmSample& s : p.gemm) EXPECT_GT(s.flops_per_s, 0.0);
  EXPECT_GT(p.elementwise_bytes_per_s, 0.0);
  EXPECT_GT(p.attention_flops_per_s, 0.0);
  EXPECT_GT(p.cpu_adam_params_per_s, 0.0);
  EXPECT_GT(p.device_adam_params_per_s, 0.0);  // one rank's AdamW rate
  EXPECT_EQ(omp_get_max_threads(), 3);
  EXPECT_NE(p.machine.find("kernels timed at 1 thread(s) per rank"), std::string::npos);
  EXPECT_GT(p.host_to_device_bytes_per_s, 0.0);
  EXPECT_GT(p.host_memory_bytes_per_s, 0.0);
  EXPECT_EQ(p.memory_working_set_bytes, 1 << 22);  // the sizes recorded
  EXPECT_EQ(p.last_level_cache_bytes, last_level_cache().bytes);
  EXPECT_TRUE(p.collectives.empty());
  EXPECT_EQ(p.nvme_read_bytes_per_s, 0.0);  // not measured here
  // Llama's operators at tiny's sizes as a Llama layer (4 heads of 16, 2 KV heads): forward
  // only in a quick run; attention at tiny's head size and Llama 3's.
  EXPECT_GT(p.rmsnorm_bytes_per_s, 0.0);
  EXPECT_GT(p.swiglu_bytes_per_s, 0.0);
  EXPECT_GT(p.rope_bytes_per_s, 0.0);
  EXPECT_EQ(p.rmsnorm_backward_bytes_per_s, 0.0);
  ASSERT_EQ(p.gqa_attention.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(p.gqa_attention[i].head_size, (std::vector<int>{16, 64, 128}[i]));
    EXPECT_GT(p.gqa_attention[i].flops_per_s, 0.0);
    EXPECT_EQ(p.gqa_attention[i].backward_flops_per_s, 0.0);
  }
  // Progress: non-decreasing, from 0 to exactly 1.
  ASSERT_FALSE(fractions.empty());
  EXPECT_EQ(fractions.front(), 0.0);
  EXPECT_EQ(fractions.back(), 1.0);
  for (std::size_t i = 1; i < fractions.size(); ++i) EXPECT_GE(fractions[i], fractions[i - 1]);
  // The written form loads back to the same rates.
  const Profile back = Profile::from_json(p.to_json(), "<round trip>");
  EXPECT_EQ(back.to_json(), p.to_json());
}

// A Llama model given: its GEMMs at its own widths, every operator forward and backward at
// its shape (one call a timing: the figures' size is not the point here).
TEST(CalibrateCompute, LlamaModelOperatorsForwardAndBackward) {
  ComputeCalibrationOptions options = compute_options({bundled_model("tiny-llama")}, true);
  options.backward = true;
  options.timing = {1, 0.0};
  set_memory_working_set(options, 1 << 22);
  options.kernel_threads = 1;
  const Profile p = calibrate_compute(options, {});
  // (m, n, k) of qkv's forward (64, 128, 64) and fc1's (64, 352, 64): Llama's widths.
  const auto sampled = [&](std::int64_t m, std::int64_t n, std::int64_t k) {
    return std::any_of(p.gemm.begin(), p.gemm.end(), [&](const GemmSample& g) {
      return g.m == m && g.n == n && g.k == k;
    });
  };
  EXPECT_TRUE(sampled(64, 128, 64));
  EXPECT_TRUE(sampled(64, 352, 64));
  EXPECT_FALSE(sampled(64, 192, 64));  // GPT's 3C
  for (double rate : {p.rmsnorm_bytes_per_s, p.rmsnorm_backward_bytes_per_s, p.swiglu_bytes_per_s,
                      p.swiglu_backward_bytes_per_s, p.rope_bytes_per_s,
                      p.rope_backward_bytes_per_s}) {
    EXPECT_GT(rate, 0.0);
  }
  ASSERT_EQ(p.gqa_attention.size(), 3u);
  for (const AttentionSample& a : p.gqa_attention) EXPECT_GT(a.backward_flops_per_s, 0.0);
  // (No round trip here: one call per timing leaves the host-memory rates to chance, and
  // loading checks AdamW's against them; the quick test above round-trips its profile.)
}

TEST(LlamaOpsModel, TheLargestLlamaModelGivenElseALlamaLayerOfTheLargest) {
  ComputeCalibrationOptions options =
      compute_options({bundled_model("tiny"), bundled_model("tiny-llama")}, true);
  EXPECT_EQ(llama_ops_model(options).name, "tiny-llama");
  options.models = {bundled_model("tiny-gpu"), bundled_model("tiny")};  // tiny-gpu the larger
  const ModelSpec twin = llama_ops_model(options);
  EXPECT_EQ(twin.hidden, 128);
  EXPECT_EQ(twin.seq_len, 128);
  EXPECT_EQ(twin.ffn_hidden, 512);
  EXPECT_EQ(twin.norm, NormKind::kRmsNorm);
  EXPECT_EQ(twin.mlp, MlpKind::kSwiglu);
  EXPECT_EQ(twin.position, PositionKind::kRope);
  EXPECT_EQ(twin.kv_heads, 1);  // tiny-gpu's 2 heads share one
  EXPECT_FALSE(twin.biases);
  // GPT-2 1.5B's 25 heads: groups of 5 (the smallest divisor of 25 above 1).
  options.models = {bundled_model("gpt2-1.5b")};
  EXPECT_EQ(llama_ops_model(options).kv_heads, 5);
  // tp 4 over tiny's 4 heads: the 2 KV heads stay (each rank holds the one its head reads).
  options.models = {bundled_model("tiny")};
  options.tp = 4;
  EXPECT_EQ(llama_ops_model(options).kv_heads, 2);
  EXPECT_EQ(llama_op_shape(llama_ops_model(options), 1, 4, false).dims.KVHl, 1);
  // The operators' shape: tiny-llama at t = 2: 2 query heads and 1 KV head of 16 a rank,
  // SwiGLU 88 wide, attention at 16, 64 and 128.
  const LlamaOpShape shape = llama_op_shape(bundled_model("tiny-llama"), 1, 2, true);
  EXPECT_EQ(shape.dims.NHl, 2);
  EXPECT_EQ(shape.dims.KVHl, 1);
  EXPECT_EQ(shape.dims.Fl, 88);
  EXPECT_EQ(shape.attention_head_sizes, (std::vector<int>{16, 64, 128}));
  EXPECT_THROW(llama_op_shape(bundled_model("tiny-llama"), 1, 3, true), ConfigError);
}

// The host-memory rates run on arrays kOutOfCacheFactor (4) x the last-level cache in a
// full calibration, at most kQuickMemoryBytes in a quick one; AdamW's parameters are the
// arrays' bytes / 16 (parameter, gradient, two moments) and the copies a quarter.
TEST(CalibrateCompute, HostMemoryIsTimedOnArraysOutOfTheCache) {
  const LastLevelCache llc = last_level_cache();
  EXPECT_GT(llc.bytes, 0);
  EXPECT_FALSE(llc.source.empty());
  const ComputeCalibrationOptions full = compute_options({bundled_model("tiny")}, false);
  EXPECT_EQ(full.memory_working_set_bytes, 4 * llc.bytes);
  EXPECT_EQ(full.last_level_cache_bytes, llc.bytes);
  EXPECT_EQ(full.adam_params, full.memory_working_set_bytes / 16);
  EXPECT_EQ(full.copy_bytes, full.memory_working_set_bytes / 4);
  const ComputeCalibrationOptions quick = compute_options({bundled_model("tiny")}, true);
  EXPECT_EQ(quick.memory_working_set_bytes, std::min(4 * llc.bytes, kQuickMemoryBytes));
}

// A small model with round numbers: h = 64, 4 heads (head size 16), s = 32, f = 256.
ModelSpec small_model() {
  ModelSpec m = bundled_model("tiny");
  m.name = "small";
  m.hidden = 64;
  m.heads = 4;
  m.seq_len = 32;
  m.ffn_hidden = 256;
  m.vocab = 128;
  return m;
}

// Device rates that read `p` (a peak and an HBM far above its rates, so nothing else limits).
DeviceRates rates_reading(const Profile& p, int element_bytes) {
  DeviceRates rates;
  rates.peak_flops = 1e15;
  rates.memory_bytes_per_s = 1e12;
  rates.element_bytes = element_bytes;
  rates.profile = &p;
  rates.elementwise_bytes_per_s = p.elementwise_bytes_per_s;
  return rates;
}

TEST(ComputeProfile, RatesAreTheTimeModelsCountsOverTheMeasuredSeconds) {
  ComputeMeasurements measured;
  GemmMeasurement g;
  g.m = 64, g.n = 96, g.k = 64;  // 2 m n k = 786432 FLOPs per call
  g.seconds = 1e-6;
  measured.gemms.push_back(g);
  g.seconds = 3e-6;  // the same shape again (another pass): merged
  measured.gemms.push_back(g);
  measured.layer_elementwise_s = 1e-6;
  measured.layer_elementwise_backward_s = 2e-6;
  measured.attention_s = 1e-6;
  measured.attention_backward_s = 4e-6;
  measured.device_adam_params_per_s = 5e9;
  measured.cpu_adam_params_per_s = 1e8;
  measured.host_to_device_bytes_per_s = 2e10;
  measured.device_to_host_bytes_per_s = 3e10;
  MeasuredAt at;
  at.model = small_model();
  at.micro_batch = 2;  // 64 tokens
  at.tp = 2;           // attention: C = 32, NH = 2, head size 16
  at.kernels = layer_kernels(executor_conventions(Backend::kCuda));  // fused biases, flash
  at.element_bytes = 2;
  const Profile p = compute_profile(measured, at);
  ASSERT_EQ(p.gemm.size(), 1u);
  // (786432 + 786432) FLOPs / (1 + 3) us.
  EXPECT_DOUBLE_EQ(p.gemm[0].flops_per_s, 1572864.0 / 4e-6);
  // Forward, per token at tp 1 with c = 2: LayerNorms 4hc = 512, two bias+residual adds
  // 2 x 3hc = 768, bias+GeLU 2cf = 1024: 2304 bytes x 64 tokens = 147456 bytes in 1 us.
  EXPECT_DOUBLE_EQ(p.elementwise_bytes_per_s, 147456.0 / 1e-6);
  // Backward, per token: 12hc = 1536, GeLU backward 4cf = 2048: 3584 x 64 = 229376 in 2 us.
  EXPECT_DOUBLE_EQ(p.elementwise_backward_bytes_per_s, 229376.0 / 2e-6);
  // Causal attention: 2 B NH T^2 HS = 2 x 2 x 2 x 1024 x 16 = 131072 FLOPs in 1 us; the
  // backward twice that, 262144, in 4 us.
  EXPECT_DOUBLE_EQ(p.attention_flops_per_s, 131072.0 / 1e-6);
  EXPECT_DOUBLE_EQ(p.attention_backward_flops_per_s, 262144.0 / 4e-6);
  EXPECT_EQ(p.device_adam_params_per_s, 5e9);
  EXPECT_EQ(p.cpu_adam_params_per_s, 1e8);
  EXPECT_EQ(p.host_to_device_bytes_per_s, 2e10);
  EXPECT_EQ(p.device_to_host_bytes_per_s, 3e10);

  // The point of the conversion: the time model, reading the profile back at the measured
  // shape, predicts the measured seconds.
  const DeviceRates rates = rates_reading(p, 2);
  const LayerForward fwd = layer_forward(at.model, at.micro_batch, 1, false, at.kernels, rates);
  EXPECT_NEAR(fwd.elementwise_s, 1e-6, 1e-18);

  // The CPU's kernels (separate biases, fp32) count other bytes for the same seconds: per
  // token 4hc + 6hc + 4hc (bias passes) = 14 x 64 x 4 = 3584, plus 2cf = 2048: 5632 x 64.
  at.kernels = layer_kernels(executor_conventions(Backend::kCpu));
  at.element_bytes = 4;
  EXPECT_DOUBLE_EQ(compute_profile(measured, at).elementwise_bytes_per_s, 360448.0 / 1e-6);
}

// Llama's operators: each rate is its llama_op_bytes over its seconds, each attention sample
// the causal FLOPs at its head size over its seconds, so that the time model, pricing the
// layer at the shape they ran at, gives back those seconds.
TEST(ComputeProfile, LlamaRatesAreTheirCountsOverTheSecondsAndPriceThemBack) {
  ComputeMeasurements measured;
  measured.layer_elementwise_s = 1e-6;
  measured.llama.rmsnorm_s = 2e-6;
  measured.llama.rmsnorm_backward_s = 3e-6;
  measured.llama.swiglu_s = 4e-6;
  measured.llama.rope_s = 5e-6;
  measured.llama.gqa = {{16, 6e-6, 7e-6}, {64, 8e-6, 0.0}};
  MeasuredAt at;
  at.model = bundled_model("tiny-llama");
  at.llama_model = bundled_model("tiny-llama");
  at.micro_batch = 1;
  at.tp = 2;
  at.kernels = layer_kernels(executor_conventions(Backend::kCpu));
  at.element_bytes = 4;
  const Profile p = compute_profile(measured, at);
  // t = 2, 64 tokens, h = 64, f/t = 88, q|k 48 channels, fp32 (llama_op_bytes).
  EXPECT_DOUBLE_EQ(p.rmsnorm_bytes_per_s, 65536.0 / 2e-6);
  EXPECT_DOUBLE_EQ(p.rmsnorm_backward_bytes_per_s, 131072.0 / 3e-6);
  EXPECT_DOUBLE_EQ(p.swiglu_bytes_per_s, 67584.0 / 4e-6);
  EXPECT_EQ(p.swiglu_backward_bytes_per_s, 0.0);  // not timed
  EXPECT_DOUBLE_EQ(p.rope_bytes_per_s, 24576.0 / 5e-6);
  // 2 B NH T^2 HS with the rank's 2 query heads: 262144 at 16, 1048576 at 64.
  ASSERT_EQ(p.gqa_attention.size(), 2u);
  EXPECT_EQ(p.gqa_attention[0].head_size, 16);
  EXPECT_DOUBLE_EQ(p.gqa_attention[0].flops_per_s, 262144.0 / 6e-6);
  EXPECT_DOUBLE_EQ(p.gqa_attention[0].backward_flops_per_s, 2 * 262144.0 / 7e-6);
  EXPECT_DOUBLE_EQ(p.gqa_attention[1].flops_per_s, 1048576.0 / 8e-6);
  EXPECT_EQ(p.gqa_attention[1].backward_flops_per_s, 0.0);
  // The elementwise timing ran GPT's kernels: counted as a GPT layer of tiny-llama's sizes.
  ModelSpec gpt = bundled_model("tiny-llama");
  gpt.norm = NormKind::kLayerNorm;
  gpt.mlp = MlpKind::kGelu;
  gpt.position = PositionKind::kLearned;
  gpt.kv_heads = 0;
  gpt.biases = true;
  EXPECT_DOUBLE_EQ(p.elementwise_bytes_per_s,
                   layer_elementwise_bytes(gpt, 1, 1, false, at.kernels, 4) / 1e-6);

  // Priced back at the shape they ran at: the layer's memory-bound seconds are the rest at
  // the elementwise rate plus exactly the operators' measured seconds; attention the sample's.
  const DeviceRates rates = rates_reading(p, 4);
  const LayerForward f = layer_forward(at.llama_model, 1, 2, false, at.kernels, rates);
  const double rest = layer_elementwise_bytes(at.llama_model, 1, 2, false, at.kernels, 4) -
                      65536.0 - 67584.0 - 24576.0;
  EXPECT_NEAR(f.elementwise_s, rest / p.elementwise_bytes_per_s + 2e-6 + 4e-6 + 5e-6, 1e-18);
  EXPECT_NEAR(f.attention_core_s(), 6e-6, 1e-18);
}

TEST(ComputeProfile, UnmeasuredStaysZeroAndBadTpThrows) {
  MeasuredAt at;
  at.model = small_model();
  const Profile p = compute_profile(ComputeMeasurements{}, at);
  EXPECT_TRUE(p.gemm.empty());
  EXPECT_EQ(p.elementwise_bytes_per_s, 0.0);  // 0: the time model's fallback, not inf
  EXPECT_EQ(p.attention_backward_flops_per_s, 0.0);
  at.tp = 3;  // does not divide 4 heads
  EXPECT_THROW(compute_profile(ComputeMeasurements{}, at), ConfigError);
}

TEST(CalibrationLayers, EpiloguesAsTheCudaLayerRunsThemEachShapeOnce) {
  ComputeCalibrationOptions options = compute_options({bundled_model("tiny-gpu")}, false);
  // tiny-gpu: BT = 128, C = 128, F = 512, V = 256, 2 heads; tp 4 does not divide the heads.
  options.gemm_tps = {1, 2, 4};
  const auto layers = calibration_layers(options);
  // 5 layers at tp 1 and 5 at tp 2, all distinct: tp 2's fc1 (128, 128, 256) has logits'
  // tp-1 shape and tp 2's logits (128, 128, 128) proj's, but not their bias or epilogue.
  ASSERT_EQ(layers.size(), 10u);
  for (const auto& [model, l] : layers) {
    EXPECT_EQ(model, "tiny-gpu");
    EXPECT_EQ(l.gelu_epilogue, l.name == "fc1") << l.name;
    EXPECT_EQ(l.dgelu_epilogue, l.name == "fc2") << l.name;
    EXPECT_EQ(l.vocab_rows, l.name == "logits") << l.name;
    EXPECT_EQ(l.bias, l.name != "logits") << l.name;
    // fc2 adds the residual in its GEMM only at tp 1 (C = 512 there, 256 at tp 2).
    EXPECT_EQ(l.residual_epilogue, l.name == "fc2" && l.C == 512) << l.name << " " << l.C;
  }
  // The same model twice adds nothing.
  options.models.push_back(bundled_model("tiny-gpu"));
  EXPECT_EQ(calibration_layers(options).size(), 10u);
  EXPECT_EQ(calibration_passes(options).size(), 3u);
  options.backward = false;
  EXPECT_EQ(calibration_passes(options), std::vector<GemmPass>{GemmPass::kForward});
}

TEST(GpuOptions, QuickKeepsTheBackwardAndRejectsShapesTheCudaKernelsCannotRun) {
  const ComputeCalibrationOptions quick = gpu_compute_options({bundled_model("tiny-gpu")}, true);
  EXPECT_TRUE(quick.backward);  // the CPU's quick run skips it
  EXPECT_FALSE(compute_options({bundled_model("tiny-gpu")}, true).backward);
  EXPECT_EQ(quick.large_timing.repeats, quick.timing.repeats);
  EXPECT_NO_THROW(check_cuda_shapes(quick));

  // tiny: hidden 64 / 4 heads = head size 16, which the flash attention kernel lacks.
  ComputeCalibrationOptions options = gpu_compute_options({bundled_model("tiny")}, true);
  try {
    check_cuda_shapes(options);
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model 'tiny'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("head size 64 or 128"), std::string::npos) << e.what();
  }
  // ffn_hidden 1004 = 8 x 125.5: bf16 rows of 2008 bytes are not 16-byte aligned.
  ModelSpec odd = bundled_model("tiny-gpu");
  odd.ffn_hidden = 1004;
  options = gpu_compute_options({odd}, true);
  EXPECT_THROW(check_cuda_shapes(options), ConfigError);
  // ... at tp 2 as well (502), but tp 4 does not divide the 2 heads: skipped, not rejected.
  odd.ffn_hidden = 1008;  // 1008 / 2 = 504 = 8 x 63: fine
  options = gpu_compute_options({odd}, true);
  options.gemm_tps = {1, 2, 4};
  EXPECT_NO_THROW(check_cuda_shapes(options));
  EXPECT_THROW(check_cuda_shapes(gpu_compute_options({}, true)), ConfigError);
}

// node_collectives.h: the intra-node group is the first node holding two ranks, the
// inter-node group the first rank of each node.
TEST(NodeLinkGroups, FirstNodeWithTwoRanksAndOneRankPerNode) {
  const NodeLinkGroups two_by_two = node_link_groups(NodeLayout::uniform(2, 2));
  EXPECT_EQ(two_by_two.intra_node, (std::vector<int>{0, 1}));
  EXPECT_EQ(two_by_two.inter_node, (std::vector<int>{0, 2}));
  // Hosts a: rank 0, b: ranks 1-2, c: rank 3 -> intra on b, inter over 0, 1, 3.
  const NodeLinkGroups uneven = node_link_groups(NodeLayout::from_hosts({"a", "b", "b", "c"}));
  EXPECT_EQ(uneven.intra_node, (std::vector<int>{1, 2}));
  EXPECT_EQ(uneven.inter_node, (std::vector<int>{0, 1, 3}));
  // One node: no inter-node group; one rank per node: no intra-node group.
  EXPECT_TRUE(node_link_groups(NodeLayout::uniform(1, 4)).inter_node.empty());
  EXPECT_EQ(node_link_groups(NodeLayout::uniform(1, 4)).intra_node, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(node_link_groups(NodeLayout::uniform(3, 1)).intra_node.empty());
  EXPECT_EQ(node_link_groups(NodeLayout::uniform(3, 1)).inter_node, (std::vector<int>{0, 1, 2}));
}

// Three nodes or more: p2p over each hop of the ring of the nodes' first ranks; two nodes'
// one pair is the inter-node group itself (no hops).
TEST(NodeLinkGroups, P2pHopsRingTheNodesFromThreeOn) {
  using Hops = std::vector<std::pair<int, int>>;
  EXPECT_TRUE(node_link_groups(NodeLayout::uniform(2, 2)).inter_node_hops.empty());
  EXPECT_TRUE(node_link_groups(NodeLayout::uniform(1, 4)).inter_node_hops.empty());
  // 3 nodes of 1: 0 -> 1 -> 2 -> back to 0.
  EXPECT_EQ(node_link_groups(NodeLayout::uniform(3, 1)).inter_node_hops, (Hops{{0, 1}, {1, 2}, {2, 0}}));
  // 4 nodes of 2: first ranks 0, 2, 4, 6.
  EXPECT_EQ(node_link_groups(NodeLayout::uniform(4, 2)).inter_node_hops,
            (Hops{{0, 2}, {2, 4}, {4, 6}, {6, 0}}));
  // Hosts a: 0, b: 1-2, c: 3 -> first ranks 0, 1, 3.
  EXPECT_EQ(node_link_groups(NodeLayout::from_hosts({"a", "b", "b", "c"})).inter_node_hops,
            (Hops{{0, 1}, {1, 3}, {3, 0}}));
}

}  // namespace
}  // namespace strata::calibrate
