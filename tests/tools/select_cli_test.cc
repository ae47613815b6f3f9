// `strata select` end to end through the binary: a select run computes exactly what each of
// its jobs computes alone under `strata run` (the schedule changes where and when, never
// what), and bad workloads are refused before anything runs.
#include <unistd.h>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/json_reader.h"
#include "tests/tools/strata_command.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using testing::CommandResult;
using Result = CommandResult;

// One BLAS/OpenMP thread everywhere: `strata select` gives each device worker one, and a
// `strata run` at another thread count may sum a GEMM in another order.
Result run_strata(const fs::path& dir, const std::string& args) {
  return testing::run_strata(dir, args, "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1");
}

Json read_json(const fs::path& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

std::string fmt_node(std::int64_t node) { return "n" + std::to_string(node) + ":"; }

class SelectCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_select_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  fs::path dir_;
};

// Two tiny models x two learning rates, plus a second batch size: five jobs, three steps each.
// 8 MiB per device does not hold a tiny-wide job's state with its activations on one device,
// so its ways offload (the budget the select figures of docs/select.md use).
// The CUDA backend's kind of workload: head size 64 (tiny-gpu), bf16 (gpt-8b's train).
const char* kCudaWorkload = R"({"name": "cuda", "jobs": [{"name": "g", "model": "tiny-gpu",
  "train": "gpt-8b", "steps": 3, "grid": {"global_batch": [8]}}]})";

const char* kWorkload = R"({
  "name": "bit-for-bit",
  "jobs": [
    {"name": "tiny", "model": "tiny", "train": "tiny", "steps": 3,
     "grid": {"lr": [0.001, 0.0003], "global_batch": [8]}},
    {"name": "wide", "model": "tiny-wide", "train": "tiny", "steps": 3,
     "grid": {"lr": [0.001, 0.0003], "global_batch": [8, 16]}}
  ]
})";

// Every job of the report, trained alone by `strata run` with the same model, training
// setup, plan and budget, loses exactly what it lost in the select run: the same doubles,
// step by step (JSON keeps a double's every bit).
// A job with the same model, training setup and plan as one already run alone is not run again
// (`strata run` is deterministic: ModelTraining.RerunIsBitIdentical); `alone_losses` keeps the
// losses by those three files' text, across the policies of one test.
using AloneLosses = std::map<std::string, std::vector<double>>;

void expect_jobs_match_strata_run(const fs::path& dir, const Json& report, const std::string& tag,
                                  AloneLosses& alone_losses) {
  int checked = 0;
  for (const Json& job : report.at("jobs")) {
    const std::string stem = tag + std::to_string(checked++);
    const std::string key =
        job.at("model_spec").dump() + job.at("train_spec").dump() + job.at("plan").dump();
    if (!alone_losses.contains(key)) {
      std::ofstream(dir / (stem + "_model.json")) << job.at("model_spec").dump(2);
      std::ofstream(dir / (stem + "_train.json")) << job.at("train_spec").dump(2);
      std::ofstream(dir / (stem + "_plan.json")) << job.at("plan").dump(2);
      const Result alone = run_strata(
          dir, "run --model " + stem + "_model.json --train " + stem + "_train.json --plan " + stem +
                   "_plan.json --device-budget-mib 8 --out " + stem + "_run");
      ASSERT_EQ(alone.exit_code, 0) << job.at("name") << "\n" << alone.output;
      alone_losses[key] = read_json(dir / (stem + "_run") / "report.json").at("losses").get<std::vector<double>>();
    }
    const auto select_losses = job.at("losses").get<std::vector<double>>();
    const auto& run_losses = alone_losses.at(key);
    ASSERT_EQ(select_losses.size(), 3u) << job.at("name");
    ASSERT_EQ(run_losses.size(), select_losses.size()) << job.at("name");
    for (std::size_t s = 0; s < run_losses.size(); ++s) {
      EXPECT_EQ(select_losses[s], run_losses[s]) << job.at("name") << " step " << s;
    }
  }
  EXPECT_EQ(checked, 6);
}

TEST_F(SelectCli, EveryPolicyComputesWhatEachJobComputesAlone) {
  write("w.json", kWorkload);
  // strata: jobs side by side and on both devices; lrtf: every job spilled, its steps hopping
  // between the two devices' workers; sequential: each job on both devices.
  AloneLosses alone_losses;
  for (const std::string policy : {"strata", "lrtf", "sequential"}) {
    const Result r = run_strata(dir_, "select --workload w.json --gpus 2 --device-budget-mib 8 "
                                      "--policy " + policy + " --out sel_" + policy);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Json report = read_json(dir_ / ("sel_" + policy) / "select_report.json");
    expect_jobs_match_strata_run(dir_, report, policy, alone_losses);
  }
}

TEST_F(SelectCli, TheReportHasALeaderboardAndOneTraceTrackPerDevice) {
  write("w.json", kWorkload);
  const Result r = run_strata(dir_, "select --workload w.json --gpus 2 --out sel");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json report = read_json(dir_ / "sel" / "select_report.json");
  // The leaderboard: every job once, by final loss, ascending.
  const Json& board = report.at("leaderboard");
  ASSERT_EQ(board.size(), 6u);
  for (std::size_t i = 1; i < board.size(); ++i) {
    EXPECT_LE(board[i - 1].at("final_loss").get<double>(), board[i].at("final_loss").get<double>());
  }
  // Without validation data the leaderboard says it ranks by training loss, and why.
  EXPECT_EQ(report.at("leaderboard_metric"), "train loss");
  EXPECT_EQ(report.at("leaderboard_reason"), "no validation data");
  EXPECT_NE(r.output.find("leaderboard: ranked by train loss: no validation data"), std::string::npos)
      << r.output;
  // The measured makespan is the last job's end; utilisation is a fraction per device.
  double last_end = 0;
  for (const Json& job : report.at("jobs")) last_end = std::max(last_end, job.at("measured_end_s").get<double>());
  EXPECT_DOUBLE_EQ(report.at("measured_makespan_s").get<double>(), last_end);
  ASSERT_EQ(report.at("device_utilisation").size(), 2u);
  for (const Json& u : report.at("device_utilisation")) {
    EXPECT_GT(u.get<double>(), 0.0);
    EXPECT_LE(u.get<double>(), 1.0);
  }
  // The trace: slices on tracks 0 and 1 only, each named by a job of the workload.
  const Json trace = read_json(dir_ / "sel" / "trace.json");
  std::set<std::int64_t> tracks;
  for (const Json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    tracks.insert(e.at("tid").get<std::int64_t>());
    EXPECT_NE(r.output.find(e.at("name").get<std::string>()), std::string::npos) << e.dump();
  }
  EXPECT_EQ(tracks, (std::set<std::int64_t>{0, 1}));
}

TEST_F(SelectCli, AnUnknownKeyIsExit2NamingFileAndKey) {
  write("w.json", R"({"name": "w", "jobs": [{"name": "a", "model": "tiny", "train": "tiny",
                      "steps": 2, "lr": 0.1}]})");
  const Result r = run_strata(dir_, "select --workload w.json --out sel");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("w.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lr"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "sel"));
}

TEST_F(SelectCli, AnEmptyGridIsExit2NamingTheKey) {
  write("w.json", R"({"name": "w", "jobs": [{"name": "a", "model": "tiny", "train": "tiny",
                      "steps": 2, "grid": {"lr": []}}]})");
  const Result r = run_strata(dir_, "select --workload w.json --out sel");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("w.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("grid.lr"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "sel"));
}

TEST_F(SelectCli, AJobThatFitsNoWayIsExit3NamingIt) {
  // 64 KiB per device: a tiny job's parameters alone are ~0.4 M floats (1.6 MB), and even the
  // spilled way keeps one layer's parameters and one micro-batch's activations on the device.
  write("w.json", R"({"name": "w", "jobs": [{"name": "too-big", "model": "tiny", "train": "tiny",
                      "steps": 2}]})");
  const Result r = run_strata(dir_, "select --workload w.json --device-budget-mib 0.0625 --out sel");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("too-big"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "sel"));
}

// local-cpu reshaped to 2 nodes of 2 devices, all 4 used. Under `strata` every job whose way
// fits a node (1 or 2 devices) is on one node, and a 4-device way on both; under
// `sequential` every job is on all 4, so on both nodes, and its prediction carries the
// inter-node share. The table says where (n<node>:<devices>), the report per job and per
// slice, the trace one process per node (device d's track under node d / 2). A CUDA cluster's
// schedule across nodes is plan-only: running it is exit 2 before any work.
TEST_F(SelectCli, JobsArePlacedOnNodesAndTheTableReportAndTraceSayWhere) {
  write("w.json", kWorkload);
  for (const std::string policy : {"strata", "sequential"}) {
    const Result r = run_strata(dir_, "select --workload w.json --nodes 2 --gpus-per-node 2 "
                                      "--gpus 4 --device-budget-mib 8 --policy " + policy +
                                      " --out sel_" + policy);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("inter-node link is priced, not exercised"), std::string::npos) << r.output;
    const Json report = read_json(dir_ / ("sel_" + policy) / "select_report.json");
    EXPECT_EQ(report.at("nodes"), 2);
    EXPECT_EQ(report.at("gpus_per_node"), 2);
    for (const Json& job : report.at("jobs")) {
      const auto devices = job.at("devices").get<std::int64_t>();
      const auto nodes = job.at("nodes").get<std::vector<std::int64_t>>();
      if (policy == "sequential") {
        EXPECT_EQ(devices, 4) << job.dump();
      }
      const std::vector<std::int64_t> want =
          devices <= 2 ? std::vector<std::int64_t>{nodes.front()} : std::vector<std::int64_t>{0, 1};
      EXPECT_EQ(nodes, want) << job.dump();
      EXPECT_EQ(job.at("inter_node_comm_s").is_null(), devices <= 2) << job.dump();
      // The table's placement: "n0:..." for a job on node 0, "n0:0-1 n1:0-1" on all 4.
      const std::string placement = job.at("placement").get<std::string>();
      if (devices == 4) {
        EXPECT_EQ(placement, "n0:0-1 n1:0-1");
      }
      EXPECT_EQ(placement.rfind(fmt_node(nodes.front()), 0), 0u) << placement;
      EXPECT_NE(r.output.find(placement), std::string::npos) << r.output;
    }
    for (const Json& slice : report.at("predicted_slices")) {
      std::set<std::int64_t> want;
      for (const Json& d : slice.at("devices")) want.insert(d.get<std::int64_t>() / 2);
      const auto nodes = slice.at("nodes").get<std::vector<std::int64_t>>();
      EXPECT_EQ(std::set<std::int64_t>(nodes.begin(), nodes.end()), want) << slice.dump();
    }
    std::set<std::int64_t> pids;
    const Json trace = read_json(dir_ / ("sel_" + policy) / "trace.json");
    for (const Json& e : trace.at("traceEvents")) {
      if (e.at("ph") != "X") continue;
      EXPECT_EQ(e.at("pid").get<std::int64_t>(), e.at("tid").get<std::int64_t>() / 2) << e.dump();
      pids.insert(e.at("pid").get<std::int64_t>());
    }
    if (policy == "sequential") {
      EXPECT_EQ(pids, (std::set<std::int64_t>{0, 1}));
    }
  }
  // On a CUDA cluster, a workload the CUDA backend trains (head size 64, bf16; tiny's 16 and
  // fp32 it refuses, and select offers no way that `strata run` would not take).
  write("w_cuda.json", kCudaWorkload);
  const Result cuda = run_strata(dir_, "select --workload w_cuda.json --cluster h100-x1 --nodes 2 "
                                       "--gpus 2 --out sel_cuda");
  EXPECT_EQ(cuda.exit_code, 2) << cuda.output;
  EXPECT_NE(cuda.output.find("spans 2 nodes"), std::string::npos) << cuda.output;
  EXPECT_NE(cuda.output.find("--plan-only"), std::string::npos) << cuda.output;
  EXPECT_FALSE(fs::exists(dir_ / "sel_cuda"));
  const Result planned = run_strata(dir_, "select --workload w_cuda.json --cluster h100-x1 "
                                          "--nodes 2 --gpus 2 --plan-only");
  EXPECT_EQ(planned.exit_code, 0) << planned.output;
  // 2 nodes of 1 GPU: a schedule leaving node 1's GPU idle is never the shortest.
  EXPECT_NE(planned.output.find("n1:0"), std::string::npos) << planned.output;
}

// The (step, validation loss) pairs of a `strata run`'s metrics.jsonl, in step order.
std::vector<std::pair<std::int64_t, double>> run_eval_losses(const fs::path& metrics) {
  std::vector<std::pair<std::int64_t, double>> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line);
    if (j.contains("eval_loss")) out.emplace_back(j.at("step").get<std::int64_t>(), j.at("eval_loss").get<double>());
  }
  return out;
}

// Two jobs that differ only in learning rate: the same tokens trained (3 steps of 8 x 64) and
// the same validation batches (seed and global batch shared), so the leaderboard can rank by
// validation loss. The workload holds out a tenth of the corpus and evaluates every 2 steps;
// the command line adds 2 batches per evaluation (a flag and the workload's "validation" merge).
const char* kValidatedWorkload = R"({
  "name": "validated",
  "validation": {"fraction": 0.1, "eval_every": 2},
  "jobs": [
    {"name": "tiny", "model": "tiny", "train": "tiny", "steps": 3,
     "grid": {"lr": [0.001, 0.0003], "global_batch": [8]}}
  ]
})";

TEST_F(SelectCli, ValidationLossesAreWhatStrataRunReportsForEachJob) {
  write("w.json", kValidatedWorkload);
  const Result r = run_strata(dir_, "select --workload w.json --gpus 2 --eval-batches 2 --out sel");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json report = read_json(dir_ / "sel" / "select_report.json");
  ASSERT_EQ(report.at("jobs").size(), 2u);
  int k = 0;
  for (const Json& job : report.at("jobs")) {
    const std::string stem = "job" + std::to_string(k++);
    std::ofstream(dir_ / (stem + "_model.json")) << job.at("model_spec").dump(2);
    std::ofstream(dir_ / (stem + "_train.json")) << job.at("train_spec").dump(2);
    std::ofstream(dir_ / (stem + "_plan.json")) << job.at("plan").dump(2);
    const Result alone = run_strata(
        dir_, "run --model " + stem + "_model.json --train " + stem + "_train.json --plan " + stem +
                  "_plan.json --valid-fraction 0.1 --eval-every 2 --eval-batches 2 --out " + stem + "_run");
    ASSERT_EQ(alone.exit_code, 0) << job.at("name") << "\n" << alone.output;
    // Evaluations after step 2 (every 2) and step 3 (the last), the same doubles bit for bit.
    const auto expected = run_eval_losses(dir_ / (stem + "_run") / "metrics.jsonl");
    ASSERT_EQ(expected.size(), 2u) << job.at("name");
    const Json& evals = job.at("eval_losses");
    ASSERT_EQ(evals.size(), expected.size()) << job.at("name");
    for (std::size_t e = 0; e < expected.size(); ++e) {
      EXPECT_EQ(evals[e].at("step").get<std::int64_t>(), expected[e].first) << job.at("name");
      EXPECT_EQ(evals[e].at("loss").get<double>(), expected[e].second) << job.at("name");
    }
    EXPECT_EQ(job.at("valid_loss").get<double>(), expected.back().second) << job.at("name");
    // The training losses too: the held-out tenth is out of the training windows in both.
    EXPECT_EQ(job.at("losses"),
              read_json(dir_ / (stem + "_run") / "report.json").at("losses")) << job.at("name");
  }
  // Equal tokens and batches: ranked by validation loss, ascending.
  EXPECT_EQ(report.at("leaderboard_metric"), "validation loss");
  const Json& board = report.at("leaderboard");
  ASSERT_EQ(board.size(), 2u);
  EXPECT_LE(board[0].at("valid_loss").get<double>(), board[1].at("valid_loss").get<double>());
  EXPECT_NE(r.output.find("leaderboard: ranked by validation loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("validation loss "), std::string::npos) << r.output;  // progress lines
}

TEST_F(SelectCli, JobsOfDifferentTokenCountsAreRankedByTrainLossWithTheReason) {
  // Global batches of 8 and 16 over the same 2 steps: 1,024 against 2,048 tokens of 64.
  write("w.json", R"({"name": "w", "jobs": [{"name": "tiny", "model": "tiny", "train": "tiny",
                      "steps": 2, "grid": {"global_batch": [16, 8]}}]})");
  const Result r = run_strata(dir_, "select --workload w.json --gpus 2 --valid-fraction 0.1 "
                                    "--eval-batches 1 --out sel");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json report = read_json(dir_ / "sel" / "select_report.json");
  EXPECT_EQ(report.at("leaderboard_metric"), "train loss");
  EXPECT_EQ(report.at("leaderboard_reason"), "jobs trained different token counts");
  EXPECT_NE(r.output.find("leaderboard: ranked by train loss: jobs trained different token counts"),
            std::string::npos) << r.output;
  const Json& board = report.at("leaderboard");
  ASSERT_EQ(board.size(), 2u);
  EXPECT_LE(board[0].at("final_loss").get<double>(), board[1].at("final_loss").get<double>());
  // Each job was still validated; only the ranking does without it.
  for (const Json& row : board) EXPECT_TRUE(row.at("valid_loss").is_number()) << row.dump();
}

// A workload that names the cluster it was written for, of a job the CUDA backend trains too.
const char* kLocalCpuWorkload = R"({"name": "w", "cluster": "local-cpu",
  "jobs": [{"name": "a", "model": "tiny-gpu", "train": "gpt-8b", "steps": 2}]})";

TEST_F(SelectCli, AnotherClusterThanTheWorkloadNamesIsAOneLineWarning) {
  write("w.json", kLocalCpuWorkload);
  const std::string stderr_only = "2>&1 >/dev/null";
  const Result other = testing::run_strata(
      dir_, "select --workload w.json --cluster h100-x1 --gpus 1 --plan-only", "", stderr_only);
  EXPECT_EQ(other.exit_code, 0) << other.output;
  EXPECT_EQ(std::count(other.output.begin(), other.output.end(), '\n'), 1) << other.output;
  EXPECT_NE(other.output.find("warning"), std::string::npos) << other.output;
  EXPECT_NE(other.output.find("local-cpu"), std::string::npos) << other.output;
  EXPECT_NE(other.output.find("h100-x1"), std::string::npos) << other.output;
  // The cluster it names, given again: nothing to say.
  const Result same = testing::run_strata(
      dir_, "select --workload w.json --cluster local-cpu --gpus 1 --plan-only", "", stderr_only);
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_EQ(same.output, "");
}

TEST_F(SelectCli, TheWorkloadsClusterPricesItWithoutCluster) {
  write("w.json", R"({"name": "w", "cluster": "h100-x1",
    "jobs": [{"name": "a", "model": "tiny-gpu", "train": "gpt-8b", "steps": 2}]})");
  const Result r = run_strata(dir_, "select --workload w.json --gpus 1 --plan-only");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on 1 device(s) of h100-x1"), std::string::npos) << r.output;
}

// A job strata's CUDA backend does not train (tiny: head size 16, fp32) has no way on a CUDA
// cluster, and the refusal says why rather than blaming memory.
TEST_F(SelectCli, AJobTheBackendDoesNotTrainIsRefusedWithTheReason) {
  write("w.json", R"({"name": "w", "cluster": "h100-x1",
    "jobs": [{"name": "a", "model": "tiny", "train": "tiny", "steps": 2}]})");
  const Result r = run_strata(dir_, "select --workload w.json --gpus 1 --plan-only");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("job 'a' has no way on cluster h100-x1: strata's executor does not "
                          "train it there: hidden / heads = 64 / 4 = 16"),
            std::string::npos) << r.output;
}

// Each bad validation setting: exit 2 with one line naming the flag or the workload's key, before
// anything runs (no --out directory).
TEST_F(SelectCli, BadValidationSettingsAreExit2NamingTheFlagOrKey) {
  write("w.json", kLocalCpuWorkload);
  for (const auto& [args, named] : std::vector<std::pair<std::string, std::string>>{
           {"--valid-fraction 1", "--valid-fraction"},
           {"--valid-fraction -0.5", "--valid-fraction"},
           {"--valid-data missing.bin", "--valid-data"},
           {"--valid-data w.json --valid-fraction 0.1", "--valid-fraction and --valid-data"},
           {"--eval-every 2", "--eval-every"},
           {"--valid-fraction 0.1 --eval-batches 0", "--eval-batches"}}) {
    const Result r = run_strata(dir_, "select --workload w.json " + args + " --out sel");
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(named), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "sel")) << args;
  }
  for (const auto& [validation, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"fraction": 1.5})", "validation.fraction"},
           {R"({"fraction": 0.1, "every": 2})", "validation.every"},
           {R"({"data": "missing.bin"})", "validation.data"}}) {
    write("v.json", R"({"name": "v", "validation": )" + validation +
                        R"(, "jobs": [{"name": "a", "model": "tiny", "train": "tiny", "steps": 2}]})");
    const Result r = run_strata(dir_, "select --workload v.json --out sel");
    EXPECT_EQ(r.exit_code, 2) << validation << "\n" << r.output;
    EXPECT_NE(r.output.find("v.json"), std::string::npos) << validation << "\n" << r.output;
    EXPECT_NE(r.output.find(key), std::string::npos) << validation << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "sel")) << validation;
  }
}

}  // namespace
}  // namespace strata
