// `strata run` and `strata select` guarding their inputs and outputs, through the binary:
// SIGINT to a one-rank run writes the steps done and exits 130; a second run (or select)
// into a locked --out is refused at start; every bad argument is exit 2 before any step
// (a plan that does not fit, exit 3); two runs in different PID namespaces sharing one
// --nvme-dir leave each other's files alone. ~15 s on the 2-core dev machine.
#include <unistd.h>

#include <signal.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/json_reader.h"
#include "tests/tools/child_process.h"
#include "tests/tools/strata_command.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using namespace strata::testing;

struct Result {
  int exit_code = -1;
  std::string err;
};

// Runs strata in `dir` to its end; stdout is dropped, stderr kept.
Result strata(const fs::path& dir, const std::string& args) {
  const CommandResult r = run_strata(dir, args, "OMP_NUM_THREADS=1", "2>&1 >/dev/null");
  return {r.exit_code, r.output};
}

constexpr const char* kNvmePlan = R"({"tp": 1, "pp": 1, "dp": 1, "virtual_stages": 1,
    "micro_batch": 1, "schedule": "1f1b", "zero_stage": 0, "recompute": "none",
    "sequence_parallel": false, "offload": {"optimizer": "nvme", "gradients": "none",
    "params": "none"}})";

class RunGuard : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_run_guard_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  Child start_run(const std::string& out, const std::string& tag) {
    return spawn({STRATA_BINARY, "run", "--plan", "tiny-single", "--model", "tiny", "--train",
                  "tiny", "--steps", "100000", "--out", (dir_ / out).string()},
                 dir_, tag);
  }
  fs::path dir_;
};

TEST_F(RunGuard, SigintToAOneRankRunWritesTheStepsDone) {
  const Child c = start_run("out", "run");
  ASSERT_TRUE(wait_for_text(c.out, "step     2/", 60)) << read_file(c.err);
  ASSERT_EQ(::kill(c.pid, SIGINT), 0);
  double elapsed = 0;
  const int code = wait_exit(c.pid, 30, &elapsed);
  const std::string err = read_file(c.err);
  EXPECT_EQ(code, 130) << err;  // 128 + SIGINT
  EXPECT_LT(elapsed, 5.0);
  EXPECT_EQ(count_lines(err), 1) << err;
  EXPECT_NE(err.find("stopped by SIGINT"), std::string::npos) << err;
  EXPECT_EQ(read_json_file((dir_ / "out" / "report.json").string())["stopped_by"], "SIGINT");
}

TEST_F(RunGuard, ASecondRunIntoALockedOutIsRefusedAtStart) {
  const Child first = start_run("out", "first");
  ASSERT_TRUE(wait_for_text(first.out, "step     1/", 60)) << read_file(first.err);
  const Result second = strata(dir_, "run --plan tiny-single --model tiny --train tiny --steps 1 "
                                     "--out out");
  EXPECT_EQ(second.exit_code, 2) << second.err;
  EXPECT_NE(second.err.find("--out: directory 'out' is in use by another strata run"),
            std::string::npos) << second.err;
  EXPECT_EQ(count_lines(second.err), 1) << second.err;
  const Result select = strata(dir_, "select --workload tiny-grid --out out");
  EXPECT_EQ(select.exit_code, 2) << select.err;
  EXPECT_NE(select.err.find("is in use by another strata run"), std::string::npos) << select.err;
  // The first run is untouched: it stops on request and its report is its own.
  ASSERT_EQ(::kill(first.pid, SIGTERM), 0);
  double elapsed = 0;
  EXPECT_EQ(wait_exit(first.pid, 30, &elapsed), 143) << read_file(first.err);
  EXPECT_EQ(read_json_file((dir_ / "out" / "report.json").string())["stopped_by"], "SIGTERM");
  // Unlocked again: the next run into it goes ahead.
  EXPECT_EQ(strata(dir_, "run --plan tiny-single --model tiny --train tiny --steps 1 --out out")
                .exit_code, 0);
}

// --cuda-graphs under --cuda-semantics: the steps of one rank and of two data-parallel ranks
// are captured and replayed (the run says so and trains), a pipeline's are run op by op and the
// run says why.
TEST_F(RunGuard, CudaGraphsSayWhetherTheStepsAreCaptured) {
  const CommandResult one = run_strata(dir_, "run --plan tiny-single --model tiny --train tiny "
                                            "--steps 3 --cuda-semantics --cuda-graphs --out one",
                                       "OMP_NUM_THREADS=1");
  EXPECT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("the second is captured as a graph"), std::string::npos) << one.output;
  EXPECT_EQ(read_json_file((dir_ / "one" / "report.json").string())["captured_steps"], true);
  const CommandResult two = run_strata(dir_, "run --plan tiny-dp2 --model tiny --train tiny "
                                            "--steps 3 --cuda-semantics --cuda-graphs --out two",
                                       "OMP_NUM_THREADS=1");
  EXPECT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("the second is captured as a graph"), std::string::npos) << two.output;
  const CommandResult pipe = run_strata(dir_, "run --plan tiny-pp2 --model tiny --train tiny "
                                             "--steps 2 --cuda-semantics --cuda-graphs --out pipe",
                                        "OMP_NUM_THREADS=1");
  EXPECT_EQ(pipe.exit_code, 0) << pipe.output;
  EXPECT_NE(pipe.output.find("steps not captured: pp 2"), std::string::npos) << pipe.output;
  EXPECT_FALSE(read_json_file((dir_ / "pipe" / "report.json").string()).contains("captured_steps"));
}

TEST_F(RunGuard, EveryBadArgumentIsExitTwoBeforeAnyStep) {
  std::ofstream(dir_ / "bad_profile.json") << R"({"machine": 1})";
  std::ofstream(dir_ / "a_file") << "x";
  const std::string run = "run --plan tiny-dp2 --model tiny --train tiny ";
  // flag -> a fragment the message must hold (the flag or the file, and what is wrong)
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--steps 0", "--steps: value 0"},
      {"--steps 2000000000", "--steps: value 2000000000"},
      {"--device-budget-mib nan", "--device-budget-mib: value nan"},
      {"--device-budget-mib -4", "--device-budget-mib: value -4"},
      {"--comm-timeout-s inf", "--comm-timeout-s: value inf"},
      {"--profile bad_profile.json", "bad_profile.json: machine"},
      {"--update-profile bad_profile.json", "bad_profile.json: machine"},
      {"--out a_file", "--out: cannot create directory 'a_file'"},
      // The CUDA backend's options on the CPU backend.
      {"--backend cpu --no-host-stream", "--no-host-stream: moves the CUDA backend's host AdamW"},
      {"--backend cpu --kernel-trace", "--kernel-trace: times the CUDA backend's layer ops"},
      {"--backend cpu --cuda-graphs", "--cuda-graphs: captures the CUDA backend's steps"},
      {"--cuda-semantics --cuda-graphs --kernel-trace", "--cuda-graphs with --kernel-trace"},
  };
  for (const auto& [flag, fragment] : cases) {
    const Result r = strata(dir_, run + flag + (flag.starts_with("--out") ? "" : " --out out"));
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.err;
    EXPECT_NE(r.err.find(fragment), std::string::npos) << flag << ": " << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << flag << ": " << r.err;
    EXPECT_FALSE(fs::exists(dir_ / "out" / "report.json")) << flag;
  }
  // A model too wide for the ranks' 2 GiB: exit 3 like `strata predict`, before allocating.
  Json model = read_json_file(std::string(STRATA_SOURCE_DIR) + "/configs/models/tiny.json");
  model["hidden"] = 65536;
  model["ffn_hidden"] = 262144;
  write_json_file((dir_ / "wide.json").string(), model);
  const Result wide = strata(dir_, "run --plan tiny-dp2 --model wide.json --train tiny --out out");
  EXPECT_EQ(wide.exit_code, 3) << wide.err;
  EXPECT_NE(wide.err.find("does not fit"), std::string::npos) << wide.err;
  // Issue 28: the message names the largest kind and what shrinks it, the budget flag of the
  // CPU backend, and says truly what `strata predict` shows. With h = 65536 the model state
  // (~12 h^2 parameters a layer) outweighs one micro-batch's activations, and tiny-dp2's
  // ZeRO-1 over d = 2 holds 4 bytes a parameter of each state kind (fp32 parameters, full
  // fp32 gradients, half of the 8 bytes of m and v): a tie, named by the kinds' order, so
  // parameters, which ZeRO-3 partitions.
  EXPECT_NE(wide.err.find("the largest kind on the device is parameters"), std::string::npos)
      << wide.err;
  EXPECT_NE(wide.err.find("zero_stage 3"), std::string::npos) << wide.err;
  EXPECT_NE(wide.err.find("--device-budget-mib "), std::string::npos) << wide.err;
  EXPECT_NE(wide.err.find("`strata predict` with the same"), std::string::npos) << wide.err;
  EXPECT_EQ(count_lines(wide.err), 1) << wide.err;
  EXPECT_FALSE(fs::exists(dir_ / "out" / "report.json"));
}

// Issue 28: a GPU cluster on a machine without a GPU (CUDA_VISIBLE_DEVICES empty hides any
// GPU the test machine has) is refused, exit 2, nothing written, naming --backend cpu; with
// --backend cpu it trains, priced as this machine's CPU, not as an H100 (whose prediction
// for a tiny step was 0.0004 s and its MFU 0.0%).
TEST_F(RunGuard, GpuClusterWithoutAGpuNeedsBackendCpu) {
  const std::string run = "run --plan tiny-single --model tiny --train tiny --steps 1 --cluster h100-x1 ";
  const CommandResult refused =
      run_strata(dir_, run + "--out refused", "CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=1", "2>&1 >/dev/null");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--cluster h100-x1: a GPU cluster"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("add --backend cpu"), std::string::npos) << refused.output;
  EXPECT_EQ(count_lines(refused.output), 1) << refused.output;
  EXPECT_FALSE(fs::exists(dir_ / "refused"));

  const CommandResult cpu = run_strata(dir_, run + "--backend cpu --out cpu",
                                       "CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=1", "2>&1");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  EXPECT_NE(cpu.output.find("cluster h100-x1 is a GPU cluster"), std::string::npos) << cpu.output;
  EXPECT_NE(cpu.output.find("predicted by the cost model (cluster local-cpu"), std::string::npos)
      << cpu.output;
}

// Two runs, each in a PID namespace of its own (as in two containers), share one --nvme-dir.
// Run A's process has pid ~62 in its namespace, run B's ~32 in another, where no pid 62
// exists: the former rule (a directory whose pid is not alive is stale) made B delete A's
// live directory at start. Both finish, every step, and leave the directory empty.
TEST_F(RunGuard, RunsInTwoPidNamespacesLeaveEachOthersNvmeFilesAlone) {
  if (std::system("unshare --pid --fork --mount-proc true >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "unshare --pid needs root (or user namespaces); "
                    "OffloadStore.CleanupDecidesByTheLockNotByThePid tests the lock directly";
  }
  write_json_file((dir_ / "plan.json").string(), Json::parse(kNvmePlan));
  fs::create_directories(dir_ / "nvme");
  const auto in_namespace = [&](int spin, const std::string& out, int steps) {
    // /bin/true `spin` times takes pids 2..spin+1, so strata runs as pid ~spin+2.
    const std::string script =
        "for i in $(seq " + std::to_string(spin) + "); do /bin/true; done; '" + STRATA_BINARY +
        "' run --plan plan.json --model tiny --train tiny --nvme-dir nvme --steps " +
        std::to_string(steps) + " --out " + out + "; exit $?";
    return spawn({"/usr/bin/unshare", "--pid", "--fork", "--mount-proc", "/bin/sh", "-c", script},
                 dir_, out);
  };
  const Child a = in_namespace(60, "a", 40);
  ASSERT_TRUE(wait_for_text(a.out, "step     2/", 60)) << read_file(a.err);
  const Child b = in_namespace(30, "b", 5);
  double elapsed = 0;
  EXPECT_EQ(wait_exit(b.pid, 60, &elapsed), 0) << read_file(b.err);
  EXPECT_EQ(wait_exit(a.pid, 60, &elapsed), 0) << read_file(a.err);
  EXPECT_EQ(read_json_file((dir_ / "a" / "report.json").string())["losses"].size(), 40u);
  EXPECT_EQ(read_json_file((dir_ / "b" / "report.json").string())["losses"].size(), 5u);
  EXPECT_TRUE(fs::is_empty(dir_ / "nvme"));
}

}  // namespace
}  // namespace strata
