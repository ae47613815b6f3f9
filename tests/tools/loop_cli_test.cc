// The loop's CLI end to end through the `strata` binary: bad reports, plans and profiles
// are exit-2 errors naming the file and the key; `strata calibrate --quick` writes a
// Profile that Profile::load accepts with positive rates and collective fits, within and
// across the nodes --nodes --ranks-per-node groups this machine's ranks into.
#include <unistd.h>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/profile.h"
#include "cost_model/pricing/profile_feedback.h"
#include "cost_model/specs/step_report.h"
#include "tests/tools/strata_command.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using Result = testing::CommandResult;
using testing::run_strata;

class LoopCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_loop_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const Json& json) {
    std::ofstream(dir_ / name) << json.dump(2);
  }
  static Json report_json(const std::string& kind) {
    StepReport r;
    r.kind = kind;
    r.plan_label = "t1.p1.d1";
    r.step_time_s = 1.0;
    r.parts.forward_s = 1.0;
    return r.to_json();
  }
  fs::path dir_;
};

TEST_F(LoopCli, CompareReportMissingKeyNamesFileAndKey) {
  write("plan.json", report_json("prediction"));
  Json measured = report_json("measurement");
  measured.erase("mfu");
  write("report.json", measured);
  const Result r = run_strata(dir_, "compare --predicted plan.json --measured report.json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("report.json: mfu: missing key"), std::string::npos) << r.output;
}

TEST_F(LoopCli, ComparePlanFilePredictionBadValueNamesFileAndKey) {
  // A plan file as `strata plan --out` writes it: plan keys plus "prediction".
  Json plan = {{"tp", 1}, {"pp", 1}, {"dp", 1}};
  plan["prediction"] = report_json("prediction");
  plan["prediction"]["bubble_fraction"] = 1.5;
  write("plan.json", plan);
  write("report.json", report_json("measurement"));
  const Result r = run_strata(dir_, "compare --predicted plan.json --measured report.json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("plan.json: prediction: bubble_fraction: got 1.5"), std::string::npos)
      << r.output;
}

TEST_F(LoopCli, CompareMissingFileAndIncompleteTraceFlags) {
  write("report.json", report_json("measurement"));
  Result r = run_strata(dir_, "compare --predicted nope.json --measured report.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("nope.json: cannot open file"), std::string::npos) << r.output;
  // --trace needs both input traces.
  write("plan.json", report_json("prediction"));
  r = run_strata(dir_, "compare --predicted plan.json --measured report.json --trace m.json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "m.json"));
}

TEST_F(LoopCli, MalformedProfileNamesFileAndKey) {
  const Json good = {{"machine", "m"},
                     {"backend", "cpu"},
                     {"gemm", Json::array({{{"m", 64}, {"n", 64}, {"k", 64}, {"flops_per_s", 1e9}},
                                           {{"m", 64}, {"n", 64}, {"k", 64}, {"flops_per_s", -1}}})},
                     {"collectives", Json::array()}};
  write("bad_gemm.json", good);
  const std::string path = (dir_ / "bad_gemm.json").string();
  try {
    Profile::load(path);
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": gemm[1].flops_per_s: got -1"),
              std::string::npos)
        << e.what();
  }
  Json no_collectives = good;
  no_collectives["gemm"].erase(1);
  no_collectives.erase("collectives");
  write("no_collectives.json", no_collectives);
  // Through the CLI: `predict --profile` rejects it with exit 2, naming file and key.
  const Result r = run_strata(dir_, "predict --model tiny --cluster local-cpu --train tiny "
                                    "--plan tiny-single --profile no_collectives.json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no_collectives.json: collectives: missing key"), std::string::npos)
      << r.output;
}

TEST_F(LoopCli, CalibrateRejectsAMissingNvmeDirAndUnknownModel) {
  // A typo in --nvme-dir must not create a directory somewhere and write 64 MiB into it.
  Result r = run_strata(dir_, "calibrate --quick --ranks 1 --nvme-dir no_such_dir");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--nvme-dir"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "no_such_dir"));
  r = run_strata(dir_, "calibrate --quick --ranks 1 --model no_such_model");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--model: value 'no_such_model'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "profile.json"));  // nothing half-written
}

TEST_F(LoopCli, CalibrateCudaWithoutADeviceIsOneLineExit2BeforeAnyWork) {
  // CUDA_VISIBLE_DEVICES="" hides every GPU, so this holds on a GPU machine too; a binary
  // built without CUDA answers the same way with its own reason.
  const std::string hide = "CUDA_VISIBLE_DEVICES=";
  Result r = run_strata(dir_, "calibrate --backend cuda --quick --out cuda.json", hide);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind("strata: calibrate --backend cuda: ", 0), 0u) << r.output;
  EXPECT_TRUE(r.output.find("no CUDA device") != std::string::npos ||
              r.output.find("built without the CUDA toolkit") != std::string::npos)
      << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;  // one line
  EXPECT_FALSE(fs::exists(dir_ / "cuda.json"));
  // CPU-only options are refused with cuda before the device is looked for.
  r = run_strata(dir_, "calibrate --backend cuda --quick --ranks 2", hide);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind("strata: --ranks: ", 0), 0u) << r.output;
  r = run_strata(dir_, "calibrate --backend cuda --quick --threads 1", hide);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind("strata: --threads: ", 0), 0u) << r.output;
  r = run_strata(dir_, "calibrate --backend rocm --quick");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--backend"), std::string::npos) << r.output;
}

TEST_F(LoopCli, CalibrateQuickWritesALoadableProfile) {
  fs::create_directories(dir_ / "nvme");
  const Result r = run_strata(dir_, "calibrate --quick --ranks 2 --out profile.json --nvme-dir nvme");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Profile p = Profile::load((dir_ / "profile.json").string());
  EXPECT_EQ(p.backend, "cpu");
  ASSERT_FALSE(p.gemm.empty());
  for (const GemmSample& s : p.gemm) EXPECT_GT(s.flops_per_s, 0.0);
  EXPECT_GT(p.elementwise_bytes_per_s, 0.0);
  EXPECT_GT(p.attention_flops_per_s, 0.0);
  EXPECT_GT(p.cpu_adam_params_per_s, 0.0);
  EXPECT_GT(p.host_to_device_bytes_per_s, 0.0);
  EXPECT_GT(p.nvme_read_bytes_per_s, 0.0);
  EXPECT_GT(p.nvme_write_bytes_per_s, 0.0);
  // Two ranks: all-reduce, reduce-scatter, all-gather and p2p, each fitted.
  ASSERT_EQ(p.collectives.size(), 4u);
  for (const CollectiveFit& c : p.collectives) {
    EXPECT_EQ(c.ranks, 2);
    EXPECT_GT(c.bus_bandwidth_bytes_per_s, 0.0);
  }
  // The scratch files of the mpirun job and of the atomic write are gone.
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

TEST_F(LoopCli, CalibrateAcrossNodesFlagsAreCheckedBeforeAnyWork) {
  std::ofstream(dir_ / "hosts") << "a slots=2\nb slots=2\n";
  std::ofstream(dir_ / "bad_hosts") << "a slots=two\n";
  const std::pair<const char*, const char*> cases[] = {
      {"calibrate --quick --nodes 2", "--nodes 2 --ranks-per-node 0: give both"},
      {"calibrate --quick --ranks-per-node 2", "--nodes 0 --ranks-per-node 2: give both"},
      {"calibrate --quick --hostfile hosts --nodes 2 --ranks-per-node 2",
       "--hostfile and --nodes --ranks-per-node"},
      {"calibrate --quick --hostfile hosts --ranks 3", "--ranks: across nodes"},
      {"calibrate --quick --hostfile bad_hosts", "expected slots=K"},
  };
  for (const auto& [command, message] : cases) {
    const Result r = run_strata(dir_, std::string(command) + " --out profile.json");
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << command << ": " << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "profile.json")) << command;  // before any work
  }
}

// --nodes 2 --ranks-per-node 2 groups 4 ranks of this machine as 2 nodes: one mpirun job
// measures ranks 0-1 as the intra-node link and ranks 0 and 2 as the inter-node one (both
// this machine's shared memory here; across real nodes, sim_nodes_calibrate_test).
TEST_F(LoopCli, CalibrateOnNodesOfThisMachineWritesBothLinks) {
  const Result r = run_strata(
      dir_, "calibrate --quick --nodes 2 --ranks-per-node 2 --out profile.json", "STRATA_CACHE_DIR=off");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Profile p = Profile::load((dir_ / "profile.json").string());
  for (const std::string link : {"intra_node", "inter_node"}) {
    std::vector<std::string> ops;
    for (const CollectiveFit& c : p.collectives) {
      if (c.link != link) continue;
      ops.push_back(c.op);
      EXPECT_EQ(c.ranks, 2) << link << " " << c.op;
      EXPECT_GT(c.bus_bandwidth_bytes_per_s, 0.0) << link << " " << c.op;
    }
    std::sort(ops.begin(), ops.end());
    EXPECT_EQ(ops, (std::vector<std::string>{"all_gather", "all_reduce", "p2p", "reduce_scatter"}))
        << link;
  }
  EXPECT_NE(r.output.find("all_reduce x2 inter_node: latency"), std::string::npos) << r.output;
}

// The loop's feedback through the CLI: a run with --update-profile folds its measured step
// into the profile's compute_time_scale, so that the profile then predicts that very step
// (the fit inverts the model; the first run's factor is the profile's), and a second run
// counts as the second of the average.
TEST_F(LoopCli, UpdateProfileMakesTheNextPredictionTheMeasuredStep) {
  // Rates that predict ~100 ms per tiny step: a 2-core VM measures 20-60 ms alone and up
  // to ~350 ms beside a parallel build, so the fitted factor lies inside its range [1/8, 8]
  // (12-800 ms), not at a clamp.
  write("profile.json", Json::parse(R"({"machine": "test", "backend": "cpu",
      "gemm": [{"m": 64, "n": 64, "k": 64, "flops_per_s": 1.4e10}],
      "attention_flops_per_s": 1.4e10, "elementwise_bytes_per_s": 1.4e10,
      "device_adam_params_per_s": 3e8, "threads_per_rank": 1, "collectives": []})"));
  write("plan.json", Json::parse(R"({"tp": 1, "pp": 1, "dp": 1, "virtual_stages": 1,
      "micro_batch": 1, "schedule": "1f1b", "zero_stage": 0, "recompute": "none",
      "sequence_parallel": false,
      "offload": {"optimizer": "none", "gradients": "none", "params": "none"}})"));
  const std::string spec = " --plan plan.json --model tiny --cluster local-cpu --train tiny";
  Result r = run_strata(dir_, "run --steps 3 --out out --profile profile.json "
                              "--update-profile profile.json" + spec);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("compute_time_scale 1 ->"), std::string::npos) << r.output;
  Profile p = Profile::load((dir_ / "profile.json").string());
  EXPECT_GT(p.compute_time_scale, 0.0);
  // One ask: the factor is its geometric mean, exp(log(ask)), equal to the ask up to rounding
  // (exp(log(8)) is not 8 to the last bit: seen when a loaded machine clamps the ask at 8).
  ASSERT_EQ(p.compute_time_scale_asks.size(), 1u);
  EXPECT_NEAR(p.compute_time_scale_asks[0], p.compute_time_scale, 1e-12 * p.compute_time_scale);
  const Result predicted = run_strata(dir_, "predict --json --profile profile.json" + spec);
  ASSERT_EQ(predicted.exit_code, 0) << predicted.output;
  const double measured_s = read_json_file((dir_ / "out" / "report.json").string())["step_time_s"];
  const double predicted_s = Json::parse(predicted.output)["step_time_s"].get<double>();
  // Unless the machine was so loaded (tests beside this one, a build) that the factor hit a
  // clamp, the fed profile predicts the measured step; at a clamp, the prediction errs on
  // the side of the measurement.
  if (p.compute_time_scale < 0.999 * kMaxTimeScale && p.compute_time_scale > 1.001 * kMinTimeScale) {
    EXPECT_NEAR(predicted_s, measured_s, 1e-6 * measured_s);
  } else if (p.compute_time_scale >= 0.999 * kMaxTimeScale) {
    EXPECT_LT(predicted_s, measured_s);
  } else {
    EXPECT_GT(predicted_s, measured_s);
  }
  r = run_strata(dir_, "run --steps 3 --out out2 --profile profile.json "
                       "--update-profile profile.json" + spec);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Profile::load((dir_ / "profile.json").string()).compute_time_scale_asks.size(), 2u);
}

}  // namespace
}  // namespace strata
