// `strata compare --critical-path` through the binary, on a one-step run of the bundled
// tiny-3d plan (tp 2, pp 2, dp 2, interleaved: eight ranks): the measured path sums to the
// measured step time less its closing all-reduce, both paths are in compare's JSON, and the
// merged trace marks each path's ops as a chain whose lengths sum to what compare prints.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/json_reader.h"
#include "tests/tools/strata_command.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using namespace strata::testing;

constexpr const char* kSpecs = "--model tiny --cluster local-cpu --train tiny --plan tiny-3d";

class CriticalPathCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("strata_critical_path_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // One step: the report's step time is then that step's (no warm-up to skip), the step
    // whose ops trace.json holds.
    const CommandResult run = run_strata(
        dir_, std::string("run ") + kSpecs + " --steps 1 --out run", "OMP_NUM_THREADS=1");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const CommandResult sim =
        run_strata(dir_, std::string("simulate ") + kSpecs + " --trace sim.json");
    ASSERT_EQ(sim.exit_code, 0) << sim.output;
    const CommandResult predicted =
        run_strata(dir_, std::string("predict ") + kSpecs + " --json > predicted.json", "", "");
    ASSERT_EQ(predicted.exit_code, 0);
    const CommandResult compare = run_strata(
        dir_, std::string("compare --predicted predicted.json --measured run/report.json "
                          "--critical-path --json --trace merged.json --predicted-trace sim.json "
                          "--measured-trace run/trace.json ") + kSpecs, "", "2>/dev/null");
    ASSERT_EQ(compare.exit_code, 0) << compare.output;
    json_ = new Json(Json::parse(compare.output));
  }
  static void TearDownTestSuite() {
    delete json_;
    json_ = nullptr;
    fs::remove_all(dir_);
  }
  void SetUp() override {
    // A failed run or compare is this test's failure, never a skip.
    if (json_ == nullptr) FAIL() << "the run or the compare failed (see the suite's setup)";
  }
  static const Json& path(const std::string& side) { return json_->at("critical_path").at(side); }
  static double measured_step_s() {
    for (const Json& f : json_->at("fields")) {
      if (f.at("key") == "step_time_s") return f.at("measured").get<double>();
    }
    ADD_FAILURE() << "no step_time_s row";
    return 0;
  }

  static inline fs::path dir_;
  static inline Json* json_ = nullptr;
};

TEST_F(CriticalPathCli, MeasuredPathSumsToTheMeasuredStepTime) {
  // Why it must hold: on the measured path each op is counted from the end of the op it
  // waited for last (its predecessor on the path) to its own end, and a gap between the two
  // (its rank busy outside the Program, a late peer) is waiting, counted too; so the path's
  // lengths and waits tile the time from the step's origin (every rank's clock starts after
  // the same barrier) to the end of the step's last op, the slowest rank's step less its
  // closing loss sum (one scalar all-reduce). So the path never ends after the step (1% for
  // the ranks' clocks, started after one barrier), and falls short of it by that all-reduce:
  // a few percent, but eight ranks time-sliced on CI's two cores wait for their slices in it
  // (5.4% of a 0.41 s step in one CI run), so the lower bound is loose.
  const Json& measured = path("measured");
  const double sum = measured.at("sum_s").get<double>();
  EXPECT_NEAR(measured.at("durations_s").get<double>() + measured.at("waiting_s").get<double>(),
              sum, 1e-9 * sum);
  EXPECT_LE(sum, 1.01 * measured_step_s());
  EXPECT_GE(sum, 0.85 * measured_step_s());
  EXPECT_GT(measured.at("ops").get<int>(), 0);
  // The predicted path ends at the predicted step and waits for nothing (every op starts
  // when the op it waited for ends).
  const Json& predicted = path("predicted");
  EXPECT_NEAR(predicted.at("sum_s").get<double>(), predicted.at("step_s").get<double>(),
              1e-9 * predicted.at("step_s").get<double>());
  EXPECT_NEAR(predicted.at("waiting_s").get<double>(), 0.0, 1e-12);
}

TEST_F(CriticalPathCli, MergedTraceMarksEachPathAsAChain) {
  const Json trace = read_json_file((dir_ / "merged.json").string());
  // merge_chrome_traces: the predicted trace is process 0, the measured one process 1.
  for (const auto& [pid, side] : std::map<int, std::string>{{0, "predicted"}, {1, "measured"}}) {
    SCOPED_TRACE(side);
    std::map<std::int64_t, Json> by_index;  // path index -> event
    for (const Json& e : trace.at("traceEvents")) {
      if (e.at("ph") != "X" || e.at("pid") != pid || !e.at("args").contains("critical_path")) continue;
      const auto k = e.at("args").at("critical_path_index").get<std::int64_t>();
      EXPECT_TRUE(by_index.emplace(k, e).second) << "path op " << k << " marked twice";
    }
    const auto ops = path(side).at("ops").get<std::int64_t>();
    ASSERT_EQ(static_cast<std::int64_t>(by_index.size()), ops);
    double sum = 0, last_end_us = 0;
    std::int64_t expected = 0;
    for (const auto& [k, e] : by_index) {
      EXPECT_EQ(k, expected++);  // indices 0 .. ops - 1: one chain, no hole
      sum += e.at("args").at("critical_path_s").get<double>();
      // Predicted: each op that adds time to the path waited for the one before it, so their
      // ends never go back. (Not the starts: a receive is drawn from when it was posted, which
      // may be before the send it waits for began; and a pass is marked at its start with no
      // time of its own, its bar spanning its body. Measured ops are not held to it: their
      // place on the path is their critical_path_s, the trace's times each rank's clock.)
      if (side == "predicted" && e.at("args").at("critical_path_s").get<double>() > 0) {
        const double end_us = e.at("ts").get<double>() + e.at("dur").get<double>();
        EXPECT_GE(end_us + 1e-3, last_end_us) << "path op " << k;
        last_end_us = end_us;
      }
    }
    const double printed = path(side).at("durations_s").get<double>();
    EXPECT_NEAR(sum, printed, 1e-9 * std::max(1.0, printed));
  }
}

}  // namespace
}  // namespace strata
