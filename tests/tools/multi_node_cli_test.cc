// `strata run` across nodes, through the binary on one machine: the rank layout checked
// before any work (a TP group across --nodes, a hostfile with too few slots, a launcher
// whose rank count is not the plan's: exit 2 naming both, said once), a run under an outside
// mpirun as it is, and --nodes N --ranks-per-node K training the same losses as one node
// with each node's NVMe files in a directory of its own, and compare showing the inter-node
// link's share of such a run. ~25 s on the 2-core dev machine.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/json_reader.h"
#include "tests/tools/strata_command.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using namespace strata::testing;

constexpr const char* kRun = "run --model tiny --train tiny --steps 2 --no-profile ";
// Outside mpirun on the CI machine: more ranks than cores, as root in containers.
constexpr const char* kMpirun = "mpirun -q --oversubscribe --bind-to none --allow-run-as-root ";

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// The loss of each step in DIR/metrics.jsonl.
std::vector<double> losses(const fs::path& out) {
  std::ifstream in(out / "metrics.jsonl");
  std::vector<double> l;
  for (std::string line; std::getline(in, line);) l.push_back(Json::parse(line)["loss"].get<double>());
  return l;
}

class MultiNode : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_multi_node_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  CommandResult strata(const std::string& args, const std::string& env = "") {
    return run_strata(dir_, args, "OMP_NUM_THREADS=1 " + env, "2>&1");
  }
  // `strata` under an outside mpirun with `ranks` ranks.
  CommandResult under_mpirun(int ranks, const std::string& args) {
    return run_shell("cd '" + dir_.string() + "' && OMP_NUM_THREADS=1 " + kMpirun + "-np " +
                     std::to_string(ranks) + " '" + STRATA_BINARY + "' " + args + " 2>&1");
  }
  fs::path dir_;
};

TEST_F(MultiNode, TpGroupAcrossSimulatedNodesIsRefusedBeforeAnyWork) {
  // tiny-tp2 on 2 nodes of 1 rank: its one TP group {0, 1} would span node0 and node1.
  const CommandResult r =
      strata(std::string(kRun) + "--plan tiny-tp2 --nodes 2 --ranks-per-node 1 --out out");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("the tensor-parallel group of world ranks 0,1 would span nodes (0 on "
                          "node0, 1 on node1), under --nodes 2 --ranks-per-node 1"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("tiny-tp2.json"), std::string::npos) << r.output;  // the plan named
  EXPECT_FALSE(fs::exists(dir_ / "out" / "metrics.jsonl"));                 // no step ran
}

TEST_F(MultiNode, HostfileWithTooFewSlotsIsRefused) {
  std::ofstream(dir_ / "hosts") << "# one node, one slot\nlocalhost slots=1\n";
  const CommandResult r = strata(std::string(kRun) + "--plan tiny-dp2 --hostfile hosts --out out");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--hostfile hosts: 1 slots on 1 host(s), but the plan needs 2 ranks"),
            std::string::npos)
      << r.output;
}

TEST_F(MultiNode, PipelineAcrossNodesIsRefusedOnlyWhenAsked) {
  // tiny-pp2 on 2 nodes of 1 rank: the pipeline {0, 1} spans them, which the plan may do...
  const CommandResult allowed =
      strata(std::string(kRun) + "--plan tiny-pp2 --nodes 2 --ranks-per-node 1 --out allowed");
  EXPECT_EQ(allowed.exit_code, 0) << allowed.output;
  // The prediction beside the measurement is of the nodes the ranks were grouped into (1
  // "GPU" a node), not of the cluster file's 8 a node, which no 2-rank plan across nodes fits.
  EXPECT_NE(allowed.output.find("predicted by the cost model (cluster local-cpu"),
            std::string::npos)
      << allowed.output;
  // ...unless --pp-within-node asks for pipelines inside a node.
  const CommandResult refused = strata(std::string(kRun) + "--plan tiny-pp2 --nodes 2 "
                                       "--ranks-per-node 1 --pp-within-node --out refused");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("the pipeline group of world ranks 0,1 would span nodes (0 on "
                                "node0, 1 on node1)"),
            std::string::npos)
      << refused.output;
}

TEST_F(MultiNode, HostfileOfThisMachineTrainsAsWithout) {
  // `--hostfile` naming only this machine: mpirun starts both ranks here, as without it;
  // the same plan and seed give the same losses.
  std::ofstream(dir_ / "hosts") << "localhost slots=2\n";
  const CommandResult with = strata(std::string(kRun) + "--plan tiny-dp2 --hostfile hosts --out with");
  ASSERT_EQ(with.exit_code, 0) << with.output;
  const CommandResult without = strata(std::string(kRun) + "--plan tiny-dp2 --out without");
  ASSERT_EQ(without.exit_code, 0) << without.output;
  EXPECT_EQ(losses(dir_ / "with").size(), 2u);
  EXPECT_EQ(losses(dir_ / "with"), losses(dir_ / "without"));
}

TEST_F(MultiNode, MaxRanksStillBoundsSimulatedNodes) {
  // --nodes groups this machine's own ranks: 2 nodes of 1 are 2 ranks here, over --max-ranks 1.
  const CommandResult r = strata(std::string(kRun) + "--plan tiny-dp2 --nodes 2 --ranks-per-node 1 "
                                 "--max-ranks 1 --out out");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("more than --max-ranks 1 allows on this machine"), std::string::npos)
      << r.output;
}

TEST_F(MultiNode, SrunRankCountOtherThanThePlansIsRefused) {
  // The variables srun sets for task 0 of `srun -n 2`: a 1-rank plan cannot run on 2 tasks.
  const CommandResult r = strata(
      std::string(kRun) + "--plan tiny-single --out out",
      "SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_NNODES=1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("tiny-single.json: the plan needs tp*pp*dp = 1*1*1 = 1 ranks, but srun "
                          "starts 2"),
            std::string::npos)
      << r.output;
}

TEST_F(MultiNode, OutsideMpirunWithTheWrongRankCountIsRefusedOnce) {
  const CommandResult r = under_mpirun(3, std::string(kRun) + "--plan tiny-dp2 --out out");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "the plan needs tp*pp*dp = 1*1*2 = 2 ranks, but mpirun starts 3"), 1)
      << r.output;
  EXPECT_EQ(count(r.output, "MPI_ABORT"), 0) << r.output;  // ended, not aborted
}

TEST_F(MultiNode, OutsideMpirunChecksTheLayoutItIsGiven) {
  const CommandResult r = under_mpirun(
      2, std::string(kRun) + "--plan tiny-tp2 --nodes 2 --ranks-per-node 1 --out out");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "the tensor-parallel group of world ranks 0,1 would span nodes"), 1)
      << r.output;
}

TEST_F(MultiNode, SimulatedNodesAndOutsideMpirunTrainAsOneNode) {
  // The same plan and seed: the node grouping moves no rank and changes no sum's order, so
  // the losses are bit-equal, under strata's own launch and under an outside mpirun alike.
  const CommandResult one = strata(std::string(kRun) + "--plan tiny-dp2 --out one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const CommandResult two = strata(std::string(kRun) +
                                   "--plan tiny-dp2 --nodes 2 --ranks-per-node 1 --out two");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const CommandResult outside = under_mpirun(2, std::string(kRun) + "--plan tiny-dp2 --out outside");
  ASSERT_EQ(outside.exit_code, 0) << outside.output;
  const std::vector<double> expected = losses(dir_ / "one");
  ASSERT_EQ(expected.size(), 2u);
  EXPECT_EQ(losses(dir_ / "two"), expected);
  EXPECT_EQ(losses(dir_ / "outside"), expected);
  EXPECT_TRUE(fs::exists(dir_ / "outside" / "report.json"));  // rank 0 wrote it
}

TEST_F(MultiNode, EachSimulatedNodeKeepsItsNvmeFilesApart) {
  // dp2 with the optimizer state on NVMe, 2 nodes of 1 rank: each rank's run directory goes
  // under its node's own directory, both left empty at the end.
  std::ofstream(dir_ / "plan.json") << R"({"tp": 1, "pp": 1, "dp": 2, "virtual_stages": 1,
      "micro_batch": 1, "schedule": "1f1b", "zero_stage": 0, "recompute": "none",
      "sequence_parallel": false, "offload": {"optimizer": "nvme", "gradients": "none",
      "params": "none"}})";
  fs::create_directories(dir_ / "nvme");
  const CommandResult r = strata(std::string(kRun) + "--plan plan.json --nodes 2 --ranks-per-node 1 "
                                 "--nvme-dir nvme --out out");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* node : {"node-node0", "node-node1"}) {
    EXPECT_TRUE(fs::is_directory(dir_ / "nvme" / node)) << node;
    EXPECT_TRUE(fs::is_empty(dir_ / "nvme" / node)) << node;  // its run directory removed
  }
}

// tiny-dp2 on 2 nodes of 1 rank, priced as 2 nodes of 1 GPU: its DP pair spans the nodes,
// so the prediction and the run's report both put their DP comm on the inter-node link
// (inter_node_share.h), and compare shows the row and the share, in text and JSON.
TEST_F(MultiNode, CompareShowsTheInterNodeShareOfARunOnSimulatedNodes) {
  const std::string shape = "--nodes 2 --gpus-per-node 1 ";
  const CommandResult run = strata(std::string(kRun) + shape +
                                   "--plan tiny-dp2 --ranks-per-node 1 --out two");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const CommandResult predicted =
      run_strata(dir_,
                 "predict --model tiny --train tiny --cluster local-cpu --no-profile "
                 "--plan tiny-dp2 " + shape + "--json",
                 "", "> predicted.json 2> predict.err");
  ASSERT_EQ(predicted.exit_code, 0) << predicted.output;
  for (const std::string file : {"predicted.json", "two/report.json"}) {
    const Json report = read_json_file((dir_ / file).string());
    ASSERT_TRUE(report.contains("inter_node_comm_s")) << file << ": " << report.dump();
    EXPECT_EQ(report["inter_node_comm_s"].get<double>(),
              report["parts"]["dp_comm_s"].get<double>())
        << file;
  }
  const CommandResult text =
      strata("compare --predicted predicted.json --measured two/report.json");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("  of comm, inter-node (s)"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("inter-node link: 100.0% of the comm predicted"), std::string::npos)
      << text.output;
  const CommandResult json =
      strata("compare --predicted predicted.json --measured two/report.json --json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_NE(json.output.find("\"inter_node_comm_s\""), std::string::npos) << json.output;
}

}  // namespace
}  // namespace strata
