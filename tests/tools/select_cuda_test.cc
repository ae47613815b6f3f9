// `strata select` on a CUDA cluster through the binary (label gpu; skipped without a GPU):
// a workload of tiny-gpu jobs on one GPU, under each policy, computes what each job computes
// alone under `strata run --backend cuda` with the same plan and budget. The CUDA kernels
// are deterministic (no atomics in any reduction; cuBLASLt's algorithm fixed per shape), and
// a select job rank is the same engine over the same backend, so its losses are the same
// doubles; only the communicators differ (host-staged over threads instead of NCCL), and a
// one-rank plan has nothing to communicate.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/json_reader.h"
#include "tests/tools/strata_command.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using testing::CommandResult;
using testing::run_strata;

Json read_json(const fs::path& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

bool have_gpu() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

// Two learning rates x two batch sizes of tiny-gpu (head size 64, bf16), three steps each,
// priced with the bundled H200 profile on both sides (pinned: a profile cache on the machine
// would change the plans).
const std::string kProfile =
    std::string(STRATA_SOURCE_DIR) + "/configs/profiles/h200-calibrated-2026-11-26.json";

// The device budget of a job rank: the profile's device headroom (the CUDA context the cost
// model counts on every device since the headroom was calibrated: 532.8 MiB on the H200)
// plus the 48 MiB this test gives a job's own memory. By the cost model (`select --plan-only`,
// checked on any machine below) every way then spills: ZeRO-2 with the optimizer state and
// the gradients on the CPU, micro-batch 4; ~620 MiB would hold each job on the device. The
// former budget, 48 MiB in all, fitted no way once the context was counted (exit 3 on the
// H200: "fits no way ... with 48 MiB of device memory each").
int budget_mib() {
  const Json profile = read_json(kProfile);
  const double context = profile.at("device_headroom").at("context_mib").get<double>();
  return static_cast<int>(std::ceil(context)) + 48;
}

constexpr const char* kTrain = R"({"global_batch": 8, "precision": "bf16", "seed": 11,
  "optimizer": {"name": "adamw", "lr": 0.001, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                "weight_decay": 0.1, "grad_clip": 1.0}, "steps": 3})";
constexpr const char* kWorkload = R"({"name": "cuda-bit-for-bit", "jobs": [
  {"name": "g", "model": "tiny-gpu", "train": "train.json", "steps": 3,
   "grid": {"lr": [0.001, 0.0003], "global_batch": [8, 16]}}]})";

// The budget and the profile, as both commands take them.
std::string budget_args() {
  return "--device-budget-mib " + std::to_string(budget_mib()) + " --profile " + kProfile;
}

// A fresh directory with the workload's files.
fs::path workload_dir(const std::string& what) {
  const fs::path dir =
      fs::temp_directory_path() / ("strata_select_cuda_" + what + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "train.json") << kTrain;
  std::ofstream(dir / "w.json") << kWorkload;
  return dir;
}

// What the GPU test below asks of select, on any machine (no skip): every job of the workload
// has a way to run on one h100-x1 GPU within the budget by the cost model (`--plan-only`, the
// schedule select would run). A budget that fits no way (exit 3) failed the GPU test first on
// an H200; here it fails on the CPU.
TEST(SelectCudaConstruction, TheWorkloadFitsItsBudgetOnOneGpuByTheCostModel) {
  const fs::path dir = workload_dir("plan_");
  for (const std::string policy : {"strata", "lrtf", "sequential"}) {
    const CommandResult r = run_strata(dir, "select --plan-only --workload w.json --cluster h100-x1 "
                                            "--gpus 1 " + budget_args() + " --policy " + policy);
    EXPECT_EQ(r.exit_code, 0) << policy << "\n" << r.output;
  }
  fs::remove_all(dir);
}

TEST(SelectCuda, EveryPolicyComputesWhatEachJobComputesAloneOnOneGpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = workload_dir("");
  for (const std::string policy : {"strata", "lrtf", "sequential"}) {
    const CommandResult r = run_strata(dir, "select --workload w.json --cluster h100-x1 --gpus 1 " +
                                     budget_args() + " --policy " + policy +
                                     " --out sel_" + policy);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Json report = read_json(dir / ("sel_" + policy) / "select_report.json");
    int checked = 0;
    for (const Json& job : report.at("jobs")) {
      const std::string stem = policy + std::to_string(checked++);
      std::ofstream(dir / (stem + "_model.json")) << job.at("model_spec").dump(2);
      std::ofstream(dir / (stem + "_train.json")) << job.at("train_spec").dump(2);
      std::ofstream(dir / (stem + "_plan.json")) << job.at("plan").dump(2);
      const CommandResult alone = run_strata(
          dir, "run --backend cuda --cluster h100-x1 --model " + stem + "_model.json --train " +
                   stem + "_train.json --plan " + stem + "_plan.json " + budget_args() + " --out " +
                   stem + "_run");
      ASSERT_EQ(alone.exit_code, 0) << job.at("name") << "\n" << alone.output;
      const auto select_losses = job.at("losses").get<std::vector<double>>();
      const auto run_losses =
          read_json(dir / (stem + "_run") / "report.json").at("losses").get<std::vector<double>>();
      ASSERT_EQ(select_losses.size(), 3u) << job.at("name");
      ASSERT_EQ(run_losses.size(), 3u) << job.at("name");
      for (std::size_t s = 0; s < 3; ++s) {
        EXPECT_EQ(select_losses[s], run_losses[s]) << policy << " " << job.at("name") << " step " << s;
      }
    }
    EXPECT_EQ(checked, 4) << policy;  // the grid's 2 x 2 points
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata
