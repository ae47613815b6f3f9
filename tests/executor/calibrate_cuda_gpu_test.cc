// `strata calibrate --backend cuda` as a library on a real GPU: the quick calibration of
// tiny-gpu fills every field the time model reads on a CUDA cluster (Llama's operators' among
// them) with a positive, finite rate; no GEMM beats the device's peak; the headroom is measured and says where; and the
// Profile loads back and changes what predict() says. GTEST_SKIPs without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/profile.h"
#include "cost_model/specs/train_spec.h"
#include "executor/calibrate/cuda_calibration.h"
#include "executor/calibrate/gpu_options.h"
#include "kernels/cuda/cuda_check.h"

namespace strata::calibrate {
namespace {

std::string config(const std::string& kind, const std::string& name) {
  return std::string(STRATA_SOURCE_DIR) + "/configs/" + kind + "/" + name + ".json";
}

bool positive_finite(double x) { return std::isfinite(x) && x > 0; }

TEST(CalibrateCudaGpu, QuickTinyGpuProfileIsCompleteBelowPeakAndPredicts) {
  if (!kernels::cuda::cuda_device_available()) {
    GTEST_SKIP() << "no CUDA device: " << kernels::cuda::cuda_unavailable_reason();
  }
  const ModelSpec model = ModelSpec::load(config("models", "tiny-gpu"));
  ComputeCalibrationOptions options = gpu_compute_options({model}, /*quick=*/true);
  options.adam_threads = 2;
  std::vector<double> fractions;
  const Profile p = calibrate_cuda_compute(
      options, [&](double f, const std::string&) { fractions.push_back(f); });

  EXPECT_EQ(p.backend, "cuda");
  EXPECT_NE(p.machine.find("CUDA driver"), std::string::npos) << p.machine;
  // tiny-gpu (BT = 128, C = 128, F = 512, V = 256) at tp 1, (m, n, k) per pass:
  //   forward  (BT, OC, C): qkv 128x384x128, proj 128x128x128, fc1 128x512x128,
  //                         fc2 128x128x512, logits 128x256x128;
  //   backward input (BT, C, OC) adds 128x128x384 and 128x128x256 (the rest repeat);
  //   backward weight (OC, C, BT) adds 384x128x128, 512x128x128, 256x128x128.
  ASSERT_EQ(p.gemm.size(), 10u);
  const ClusterSpec h100 = ClusterSpec::load(config("clusters", "h100-x1"));
  for (const GemmSample& s : p.gemm) {
    EXPECT_TRUE(positive_finite(s.flops_per_s)) << s.m << "x" << s.n << "x" << s.k;
    // Dense bf16 peak, 989 TFLOP/s (the H200's is the same): a rate above it is a timing bug.
    EXPECT_LT(s.flops_per_s, h100.device.bf16_flops) << s.m << "x" << s.n << "x" << s.k;
  }
  // Every field compute_model.cc and time_model.cc read for a CUDA cluster.
  EXPECT_TRUE(positive_finite(p.elementwise_bytes_per_s));
  EXPECT_TRUE(positive_finite(p.elementwise_backward_bytes_per_s));
  EXPECT_TRUE(positive_finite(p.attention_flops_per_s));
  EXPECT_TRUE(positive_finite(p.attention_backward_flops_per_s));
  EXPECT_TRUE(positive_finite(p.device_adam_params_per_s));
  EXPECT_TRUE(positive_finite(p.cpu_adam_params_per_s));
  EXPECT_TRUE(positive_finite(p.host_to_device_bytes_per_s));
  EXPECT_TRUE(positive_finite(p.device_to_host_bytes_per_s));
  // Llama's operators through CudaLayerOps at tiny-gpu's sizes as a Llama layer (2 heads of
  // 64 sharing one KV head), forward and backward; attention at head sizes 64 and 128.
  for (double rate : {p.rmsnorm_bytes_per_s, p.rmsnorm_backward_bytes_per_s, p.swiglu_bytes_per_s,
                      p.swiglu_backward_bytes_per_s, p.rope_bytes_per_s,
                      p.rope_backward_bytes_per_s}) {
    EXPECT_TRUE(positive_finite(rate));
    EXPECT_LT(rate, 1e13);  // above any HBM's bandwidth: a timing bug
  }
  ASSERT_EQ(p.gqa_attention.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(p.gqa_attention[i].head_size, i == 0 ? 64 : 128);
    EXPECT_TRUE(positive_finite(p.gqa_attention[i].flops_per_s));
    EXPECT_TRUE(positive_finite(p.gqa_attention[i].backward_flops_per_s));
    EXPECT_LT(p.gqa_attention[i].flops_per_s, h100.device.bf16_flops);
  }
  // PCIe: well under 1 TB/s; the attention well under the peak.
  EXPECT_LT(p.host_to_device_bytes_per_s, 1e12);
  EXPECT_LT(p.attention_flops_per_s, h100.device.bf16_flops);
  EXPECT_TRUE(p.collectives.empty());  // one GPU
  // The context alone takes hundreds of MiB on a Hopper; below 1 MiB the measurement failed.
  EXPECT_GT(p.headroom.context_bytes, 1 << 20);
  EXPECT_GE(p.headroom.communicator_bytes, 0.0);
  EXPECT_EQ(p.headroom.source.rfind("measured by strata calibrate --backend cuda on ", 0), 0u)
      << p.headroom.source;
  ASSERT_FALSE(fractions.empty());
  EXPECT_EQ(fractions.back(), 1.0);

  // Written and loaded back, the profile prices a tiny-gpu step on the H100 cluster with
  // its rates instead of the datasheet's.
  const std::string path =
      (std::filesystem::temp_directory_path() / "strata_calibrate_cuda_gpu_test.json").string();
  write_json_file(path, p.to_json());
  const Profile loaded = Profile::load(path);
  std::filesystem::remove(path);
  TrainSpec train = TrainSpec::load(config("train", "tiny"));
  train.precision = Precision::kBf16;  // as the CUDA backend trains
  const Plan plan = Plan::load(config("plans", "tiny-single"));
  const Prediction with = predict(model, h100, train, plan, &loaded);
  const Prediction without = predict(model, h100, train, plan, nullptr);
  EXPECT_TRUE(positive_finite(with.step_time_s));
  EXPECT_NE(with.step_time_s, without.step_time_s);
}

}  // namespace
}  // namespace strata::calibrate
