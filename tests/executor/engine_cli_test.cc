// `strata run` end to end: the command validates before launching (exit 2 with one line),
// re-launches itself under mpirun for a multi-rank plan, and writes a measurement report
// whose losses match the single-rank run's, a trace with every rank, and per-tag memory; and
// 200 steps of the tiny model on the generated corpus lower the loss.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "cost_model/chrome_trace.h"
#include "cost_model/json_reader.h"
#include "cost_model/step_report.h"

namespace strata {
namespace {
namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("strata_engine_cli_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  return dir;
}

// Runs `strata args` and returns its exit code. One BLAS/OpenMP thread per rank: on the
// 2-core CI machine extra threads only contend (mpi_launch.h passes these through).
int strata(const std::string& args) {
  const std::string cmd = std::string("OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ") + STRATA_BINARY +
                          " " + args + " > /dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

TEST(StrataRun, RejectsBadInputBeforeLaunching) {
  const fs::path out = scratch("bad");
  EXPECT_EQ(strata("run --plan tiny-dp2 --model tiny --train tiny --data /no/such/file --out " +
                   out.string()),
            2);
  EXPECT_EQ(strata("run --plan tiny-dp2 --model tiny --train tiny --max-ranks 1 --out " + out.string()),
            2);
  EXPECT_FALSE(fs::exists(out / "report.json"));  // nothing half-written
}

TEST(StrataRun, MultiRankReportMatchesSingleRank) {
  const fs::path one = scratch("single");
  const fs::path many = scratch("tp2_pp2");
  // A t2 p2 d1 plan written here (4 ranks: relaunched under mpirun by strata itself).
  fs::create_directories(many);
  const fs::path plan = many / "plan.json";
  write_json_file(plan.string(),
                  Json{{"tp", 2}, {"pp", 2}, {"dp", 1}, {"virtual_stages", 1}, {"micro_batch", 2},
                       {"schedule", "1f1b"}, {"zero_stage", 1},
                       {"offload", {{"optimizer", "none"}, {"gradients", "none"}, {"params", "none"}}},
                       {"recompute", "none"}, {"sequence_parallel", false}});
  ASSERT_EQ(strata("run --plan tiny-single --model tiny --train tiny --steps 3 --out " + one.string()), 0);
  ASSERT_EQ(strata("run --plan " + plan.string() + " --model tiny --train tiny --steps 3 --out " +
                   many.string()),
            0);
  const StepReport a = StepReport::load((one / "report.json").string());
  const StepReport b = StepReport::load((many / "report.json").string());
  EXPECT_EQ(b.kind, "measurement");
  ASSERT_EQ(a.losses.size(), 3u);
  ASSERT_EQ(b.losses.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(b.losses[i], a.losses[i], 1e-4 * a.losses[i]) << "step " << i;  // DESIGN.md contract
  }
  ASSERT_EQ(b.per_rank.size(), 4u);
  for (const auto& r : b.per_rank) EXPECT_GT(r.peak_bytes.device, 0) << "rank " << r.rank;
  // Tokens/s is the global batch's 8 x 64 tokens over the measured step time.
  EXPECT_NEAR(b.tokens_per_s, 8 * 64 / b.step_time_s, 1e-6 * b.tokens_per_s);
  // The parts add up to the step (other_s takes the remainder).
  EXPECT_NEAR(b.parts.sum(), b.step_time_s, 1e-9);
  const ChromeTrace trace = read_chrome_trace((many / "trace.json").string());
  std::set<std::int64_t> pids;
  std::set<std::string> names;
  for (const auto& e : trace.events) {
    pids.insert(e.pid);
    names.insert(e.name);
  }
  EXPECT_EQ(pids, (std::set<std::int64_t>{0, 1, 2, 3}));
  for (const char* op : {"forward", "backward", "send_forward", "recv_forward", "send_backward",
                         "recv_backward", "optimizer_step"}) {
    EXPECT_TRUE(names.count(op)) << op;
  }
  const Json tags = read_json_file((many / "memory_tags.json").string());
  EXPECT_EQ(tags.at("ranks").size(), 4u);
}

// A one-rank run trains in strata's own process, which re-executes itself with --threads in
// OMP_NUM_THREADS / OPENBLAS_NUM_THREADS (the caller's 1 here is overridden). The kernels
// split work so that every output element has one owner and one summation order, so two
// threads give the one-thread losses to the bit.
TEST(StrataRun, OneRankRunGivesTheSameLossesAtAnyThreadCount) {
  const fs::path one = scratch("threads1");
  const fs::path two = scratch("threads2");
  ASSERT_EQ(strata("run --plan tiny-single --model tiny --train tiny --steps 3 --threads 1 --out " +
                   one.string()),
            0);
  ASSERT_EQ(strata("run --plan tiny-single --model tiny --train tiny --steps 3 --threads 2 --out " +
                   two.string()),
            0);
  const StepReport a = StepReport::load((one / "report.json").string());
  const StepReport b = StepReport::load((two / "report.json").string());
  ASSERT_EQ(a.losses.size(), 3u);
  ASSERT_EQ(b.losses.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(b.losses[i], a.losses[i]) << "step " << i;
  // MFU's peak is one core's (local-cpu: 0.2 TFLOP/s) times the cores the rank's threads
  // keep busy, min(threads, 2 cores / 1 rank): 1 core at --threads 1, 2 at --threads 2 (a
  // 2-thread run against one core's peak read 105%).
  EXPECT_NEAR(a.mfu, a.model_tflops_per_gpu / 0.2, 1e-9 * a.mfu);
  EXPECT_NEAR(b.mfu, b.model_tflops_per_gpu / 0.4, 1e-9 * b.mfu);
}

TEST(StrataRun, LossFallsOver200Steps) {
  const fs::path out = scratch("long");
  ASSERT_EQ(strata("run --plan tiny-single --model tiny --train tiny --steps 200 --out " + out.string()), 0);
  const StepReport r = StepReport::load((out / "report.json").string());
  ASSERT_EQ(r.losses.size(), 200u);
  // Starts at ln 256 = 5.55 (uniform over bytes, see model_test); the generated text uses
  // ~60 symbols with a skewed word distribution, so a model that learnt even its byte
  // bigrams is far below ln 60 = 4.1: require the last 10 steps' mean below 2.5 (measured ~2.0).
  double tail = 0;
  for (std::size_t i = 190; i < 200; ++i) tail += r.losses[i] / 10;
  EXPECT_NEAR(r.losses.front(), std::log(256.0), 0.05);
  EXPECT_LT(tail, 2.5);
}

}  // namespace
}  // namespace strata
