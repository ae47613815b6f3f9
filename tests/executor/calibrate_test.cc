// The calibration library: timing medians, the alpha-beta fit on synthetic points, the
// model's GEMM shapes, sample merging, and a quick compute calibration of the tiny model
// producing a Profile with positive rates that round-trips through JSON.
#include <gtest/gtest.h>
#include <omp.h>

#include <stdexcept>

#include "cost_model/errors.h"
#include "cost_model/model_spec.h"
#include "executor/calibrate/calibration.h"
#include "executor/calibrate/collective_bench.h"
#include "executor/calibrate/compute_bench.h"
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
  options.copy_bytes = 1 << 22;  // keep the test short
  options.adam_params = 1 << 16;
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
  EXPECT_TRUE(p.collectives.empty());
  EXPECT_EQ(p.nvme_read_bytes_per_s, 0.0);  // not measured here
  // Progress: non-decreasing, from 0 to exactly 1.
  ASSERT_FALSE(fractions.empty());
  EXPECT_EQ(fractions.front(), 0.0);
  EXPECT_EQ(fractions.back(), 1.0);
  for (std::size_t i = 1; i < fractions.size(); ++i) EXPECT_GE(fractions[i], fractions[i - 1]);
  // The written form loads back to the same rates.
  const Profile back = Profile::from_json(p.to_json(), "<round trip>");
  EXPECT_EQ(back.to_json(), p.to_json());
}

}  // namespace
}  // namespace strata::calibrate
