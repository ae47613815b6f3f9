// `strata run` of a 4-rank plan ended from outside, through the binary: SIGTERM to the
// command stops every rank (seconds: the ranks agree on the stop after their current step)
// with one message and exit 143, the report of the steps done marked "stopped_by", and
// nothing left in the NVMe directory or /dev/shm; a rank that hangs (SIGSTOP) ends the job
// after --comm-timeout-s (not before), naming the call and the stopped rank, exit 4. ~10 s
// each on the 2-core dev machine.
// Durations: the behaviour is asserted by the exit codes and messages; the clock only tells
// a stop from a hang (the run has 100000 steps, so without the stop it would go on for
// hours). The upper bounds are 10x what a quiet machine needs (5 s to stop, the timeout +
// 5 s for the watchdog): this is a shared 2-core machine running 4 ranks beside other
// ctest -j2 jobs, where one descheduled rank delays everyone by seconds.
#include <unistd.h>

#include <signal.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/json_reader.h"
#include "executor/runtime/mpi_launch.h"
#include "tests/tools/child_process.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using namespace strata::testing;

// pp = 2, dp = 2 with the optimizer state on NVMe: four ranks, each with NVMe files.
constexpr const char* kPlan = R"({"tp": 1, "pp": 2, "dp": 2, "virtual_stages": 1,
    "micro_batch": 1, "schedule": "1f1b", "zero_stage": 1, "recompute": "none",
    "sequence_parallel": false, "offload": {"optimizer": "nvme", "gradients": "none",
    "params": "none"}})";

class RunStopMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_run_stop_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "nvme");
    write_json_file((dir_ / "plan.json").string(), Json::parse(kPlan));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The run, started and past its third step; ranks_ and job_dir_ filled in.
  Child start(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {STRATA_BINARY, "run", "--plan", (dir_ / "plan.json").string(),
                                     "--model", "tiny", "--train", "tiny", "--steps", "100000",
                                     "--nvme-dir", (dir_ / "nvme").string(), "--out",
                                     (dir_ / "out").string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const Child c = spawn(argv, dir_, "run");
    EXPECT_TRUE(wait_for_text(c.out, "step     3/", 60)) << read_file(c.err);
    // The launcher's one child is mpirun; mpirun's children are the ranks.
    const std::vector<int> mpirun = child_pids(c.pid);
    EXPECT_EQ(mpirun.size(), 1u);
    if (!mpirun.empty()) ranks_ = child_pids(mpirun[0]);
    EXPECT_EQ(ranks_.size(), 4u);
    for (const auto& entry : fs::directory_iterator("/dev/shm")) {
      if (entry.path().filename().string().starts_with("strata-job-" + std::to_string(c.pid) + "-")) {
        job_dir_ = entry.path();
      }
    }
    return c;
  }

  // After the run: every rank gone, no NVMe file, the job directory (and the OpenMPI
  // segments and session files in it) gone.
  void expect_nothing_left() {
    for (const int pid : ranks_) EXPECT_FALSE(process_exists(pid)) << "rank pid " << pid;
    EXPECT_TRUE(fs::is_empty(dir_ / "nvme"));
    ASSERT_FALSE(job_dir_.empty());
    EXPECT_FALSE(fs::exists(job_dir_)) << job_dir_;
  }

  fs::path dir_;
  std::vector<int> ranks_;
  fs::path job_dir_;
};

TEST_F(RunStopMpi, SigtermStopsEveryRankCleanly) {
  const Child c = start({});
  // OpenMPI's shared-memory segments are in the job directory, not loose in /dev/shm.
  bool segments_inside = false;
  for (const auto& entry : fs::directory_iterator(job_dir_)) {
    segments_inside |= entry.path().filename().string().starts_with("vader_segment");
  }
  EXPECT_TRUE(segments_inside) << job_dir_;
  EXPECT_FALSE(fs::is_empty(dir_ / "nvme"));  // the ranks' run directories, while they run
  ASSERT_EQ(::kill(c.pid, SIGTERM), 0);
  double elapsed = 0;
  const int code = wait_exit(c.pid, 120, &elapsed);
  const std::string err = read_file(c.err);
  EXPECT_EQ(code, 143) << err;  // 128 + SIGTERM
  EXPECT_LT(elapsed, 10 * 5.0);  // stopped, not hung (see the top)
  EXPECT_EQ(count_lines(err), 1) << err;
  EXPECT_NE(err.find("stopped by SIGTERM"), std::string::npos) << err;
  const Json report = read_json_file((dir_ / "out" / "report.json").string());
  EXPECT_EQ(report["stopped_by"], "SIGTERM");
  EXPECT_GE(report["losses"].size(), 3u);  // at least the three steps seen before the signal
  expect_nothing_left();
}

TEST_F(RunStopMpi, AStoppedRankEndsTheJobNamingItWithinTheTimeout) {
  const double timeout_s = 3;
  const Child c = start({"--comm-timeout-s", "3"});
  ASSERT_FALSE(ranks_.empty());
  const int stopped = ranks_.back();
  ASSERT_EQ(::kill(stopped, SIGSTOP), 0);
  double elapsed = 0;
  const int code = wait_exit(c.pid, 120, &elapsed);
  const std::string err = read_file(c.err);
  EXPECT_EQ(code, 4) << err;  // kExitCommTimeout: the watchdog fired
  EXPECT_LT(elapsed, timeout_s + 10 * 5) << err;  // ended, not hung (see the top)
  // Nobody gave up early: a lower bound a slow machine cannot break (it only lengthens).
  EXPECT_GE(elapsed, timeout_s) << err;
  // One message: the call waited in, the bound, and the stopped rank by its pid.
  EXPECT_EQ(count_lines(err), 1) << err;
  EXPECT_NE(err.find("MPI_"), std::string::npos) << err;
  EXPECT_NE(err.find("(--comm-timeout-s 3)"), std::string::npos) << err;
  EXPECT_NE(err.find("(pid " + std::to_string(stopped) + ") is stopped"), std::string::npos) << err;
  expect_nothing_left();
}

}  // namespace
}  // namespace strata
