// `strata run` with offload plans end to end: an all-NVMe ZeRO-3 plan on 2 ranks trains,
// writes the bytes per link into report.json equal to the cost model's, and leaves no file
// in --nvme-dir; an unwritable --nvme-dir (under /proc, or under a regular file) and a full
// NVMe tier (a cluster whose NVMe holds less than the state) are one line on stderr, exit
// code 2, and nothing left behind.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/step_report.h"
#include "cost_model/pricing/time_model.h"
#include "cost_model/specs/train_spec.h"

namespace strata {
namespace {
namespace fs = std::filesystem;

// A scratch directory per test, removed with everything in it when the test ends.
class Scratch {
 public:
  explicit Scratch(const std::string& name)
      : dir_(fs::temp_directory_path() /
             ("strata_offload_cli_" + std::to_string(::getpid()) + "_" + name)) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  operator const fs::path&() const { return dir_; }

 private:
  fs::path dir_;
};

struct Result {
  int code = 0;
  std::string err;
};

// Runs `strata args`, stderr captured to a file.
Result strata(const std::string& args, const fs::path& dir) {
  const fs::path err = dir / "stderr.txt";
  const std::string cmd = std::string("OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ") +
                          STRATA_BINARY + " " + args + " > /dev/null 2> " + err.string();
  const int status = std::system(cmd.c_str());
  std::ifstream in(err);
  std::stringstream text;
  text << in.rdbuf();
  return Result{WIFEXITED(status) ? WEXITSTATUS(status) : 128, text.str()};
}

fs::path write_plan(const fs::path& dir, std::int64_t dp) {
  const fs::path plan = dir / "plan.json";
  write_json_file(plan.string(),
                  Json{{"tp", 1}, {"pp", 1}, {"dp", dp}, {"virtual_stages", 1}, {"micro_batch", 2},
                       {"schedule", "1f1b"}, {"zero_stage", 3},
                       {"offload", {{"optimizer", "nvme"}, {"gradients", "nvme"}, {"params", "nvme"}}},
                       {"recompute", "none"}, {"sequence_parallel", false}});
  return plan;
}

bool empty_dir(const fs::path& dir) { return fs::is_empty(dir); }

TEST(StrataRunOffload, AllNvmePlanReportsThePredictedBytesAndCleansUp) {
  const Scratch scratch("all_nvme");
  const fs::path& dir = scratch;
  const fs::path nvme = dir / "nvme";
  fs::create_directories(nvme);
  const fs::path plan = write_plan(dir, 2);
  const Result r = strata("run --plan " + plan.string() + " --model tiny --train tiny --steps 2 " +
                              "--prefetch-depth 3 --nvme-dir " + nvme.string() + " --out " +
                              (dir / "out").string(),
                          dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const StepReport rep = StepReport::load((dir / "out" / "report.json").string());
  // Both ranks of a d = 2 plan move the same bytes; the cost model's count (worked per unit
  // in time_model.h) for pipeline rank 0.
  const TransferBytes want = offload_transfer_bytes(
      ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/tiny.json"),
      Plan::load(plan.string()),
      TrainSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/train/tiny.json"), 0);
  EXPECT_FALSE(want.empty());
  EXPECT_EQ(rep.transfers, want);
  EXPECT_TRUE(empty_dir(nvme));  // the run directory went with the run
}

TEST(StrataRunOffload, UnwritableNvmeDirIsOneLineExitTwo) {
  const Scratch scratch("unwritable");
  const fs::path& dir = scratch;
  const fs::path plan = write_plan(dir, 1);
  const fs::path file = dir / "a_file";
  std::ofstream(file) << "x";
  for (const std::string& bad : {std::string("/proc/forbidden"), (file / "sub").string()}) {
    const Result r = strata("run --plan " + plan.string() + " --model tiny --train tiny " +
                                "--steps 1 --nvme-dir " + bad + " --out " + (dir / "out").string(),
                            dir);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--nvme-dir"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(dir / "out" / "report.json"));
  }
}

// The cost model sees the NVMe tier is too small before any rank starts: exit 3, like
// `strata predict`, one line naming the tier, nothing written. (The store's own capacity
// check during a run is nvme_store_test's.)
TEST(StrataRunOffload, FullNvmeIsCaughtBeforeAnyRankStarts) {
  const Scratch scratch("full");
  const fs::path& dir = scratch;
  const fs::path nvme = dir / "nvme";
  fs::create_directories(nvme);
  const fs::path plan = write_plan(dir, 1);
  // local-cpu with 1 MB of NVMe: the tiny model's params alone are 420,480 x 4 = 1.7 MB.
  Json cluster = read_json_file(std::string(STRATA_SOURCE_DIR) + "/configs/clusters/local-cpu.json");
  cluster["nvme"]["capacity_gb"] = 0.001;
  write_json_file((dir / "cluster.json").string(), cluster);
  const Result r = strata("run --plan " + plan.string() + " --model tiny --train tiny --steps 1 " +
                              "--cluster " + (dir / "cluster.json").string() + " --nvme-dir " +
                              nvme.string() + " --out " + (dir / "out").string(),
                          dir);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("nvme"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(empty_dir(nvme));
  EXPECT_FALSE(fs::exists(dir / "out" / "report.json"));
}

}  // namespace
}  // namespace strata
