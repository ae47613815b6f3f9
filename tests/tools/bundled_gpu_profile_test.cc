// GPU predictions checked on the CPU: the profile `strata calibrate --backend cuda` wrote on
// an H200 (configs/profiles/h200-calibrated-2026-11-26.json, from
// ../shared/reference/profiles/) prices GPT-2 124M on the h100-x1 cluster, where it is the
// bundled default, against the step times measured with it on that GPU
// (../shared/reference/profiles/README.md: median of steps 2-8 of an 8-step run).
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/json_reader.h"
#include "tests/tools/strata_command.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using testing::run_strata;

class BundledGpuProfile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_bundled_gpu_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "empty_cache");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The measured runs' shape: one GPU, micro-batch b, 4 micro-batches a step (global 4b),
  // as tools/device/gpu_phases.sh wrote them.
  void write_inputs(int micro_batch, const std::string& recompute) {
    Json plan = {{"tp", 1}, {"pp", 1}, {"dp", 1}, {"virtual_stages", 1},
                 {"micro_batch", micro_batch}, {"schedule", "1f1b"}, {"zero_stage", 0},
                 {"offload", {{"optimizer", "none"}, {"gradients", "none"}, {"params", "none"}}},
                 {"recompute", recompute}, {"sequence_parallel", false}};
    write_json_file((dir_ / "plan.json").string(), plan);
    Json train = read_json_file(std::string(STRATA_SOURCE_DIR) + "/configs/train/gpt2.json");
    train["global_batch"] = 4 * micro_batch;
    write_json_file((dir_ / "train.json").string(), train);
  }

  // The predicted step and the profile the prediction names, with no cached profile.
  std::pair<double, std::string> predict(const std::string& extra = "") {
    const testing::CommandResult r = run_strata(
        dir_, "predict --json --model gpt2-124m --cluster h100-x1 --train train.json "
              "--plan plan.json " + extra,
        "STRATA_CACHE_DIR='" + (dir_ / "empty_cache").string() + "'", "2>/dev/null");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const Json j = Json::parse(r.output);
    return {j.at("step_time_s").get<double>(), j.at("profile").get<std::string>()};
  }

  fs::path dir_;
};

// The bound: 10%, the issue's target for a calibrated GPU prediction (issue 25, "GPT-2 124M
// step time within 10% after calibrate"). With this profile the model predicted 0.1328 s
// (-7.6%) and 0.0828 s (-6.8%) when the GPU measured these steps; the measured medians
// spread by about 1% between runs, so 10% leaves the observed error some 2.4 points for the
// model's later changes before this test calls one a regression.
constexpr double kBound = 0.10;

TEST_F(BundledGpuProfile, Gpt2SmallBatch16IsPricedWithin10PercentOfTheH200) {
  write_inputs(16, "none");
  const auto [step_s, profile] = predict();
  EXPECT_EQ(profile, "h200-calibrated-2026-11-26");  // the bundled default for h100 GPUs
  constexpr double kMeasuredS = 0.1437;
  EXPECT_NEAR(step_s, kMeasuredS, kBound * kMeasuredS) << "predicted " << step_s << " s";
  // Uncalibrated, the cluster file's datasheet rates: predicted 0.1988 s (+38%) on the same
  // step; the profile must do better than that.
  const auto [uncalibrated_s, none] = predict("--no-profile");
  EXPECT_EQ(none, "none");
  EXPECT_LT(std::fabs(step_s - kMeasuredS), std::fabs(uncalibrated_s - kMeasuredS))
      << "with the profile " << step_s << " s, without " << uncalibrated_s << " s";
}

TEST_F(BundledGpuProfile, Gpt2SmallBatch8FullRecomputeIsPricedWithin10PercentOfTheH200) {
  write_inputs(8, "full");
  const auto [step_s, profile] = predict();
  EXPECT_EQ(profile, "h200-calibrated-2026-11-26");
  constexpr double kMeasuredS = 0.0888;
  EXPECT_NEAR(step_s, kMeasuredS, kBound * kMeasuredS) << "predicted " << step_s << " s";
}

TEST_F(BundledGpuProfile, TheTextOutputSaysTheProfileIsBundledAndMeasuredOnAnH200) {
  write_inputs(16, "none");
  const testing::CommandResult r = run_strata(
      dir_, "predict --model gpt2-124m --cluster h100-x1 --train train.json --plan plan.json",
      "STRATA_CACHE_DIR='" + (dir_ / "empty_cache").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("profile: h200-calibrated-2026-11-26 (bundled for H100-SXM5-80GB GPUs"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("measured on an NVIDIA H200"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace strata
