// The rank layout across nodes (executor/comm/node_layout.h), Open MPI hostfiles
// (hostfile.h) and the shared-directory verdict (shared_dir_probe.h), without MPI.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cost_model/specs/errors.h"
#include "executor/comm/hostfile.h"
#include "executor/comm/node_layout.h"
#include "executor/comm/shared_dir_probe.h"

namespace strata {
namespace {

// The message of the InfeasiblePlan `f` throws (empty when it throws none).
template <typename F>
std::string infeasible_message(F f) {
  try {
    f();
  } catch (const InfeasiblePlan& e) {
    return e.what();
  }
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(NodeLayout, FillsHostsBySlot) {
  // 2 slots on a, 3 on b, 5 ranks: ranks 0-1 on a, 2-4 on b (mpirun's --map-by slot).
  const NodeLayout layout = NodeLayout::by_slots({{"a", 2}, {"b", 3}}, 5, "hosts.txt");
  EXPECT_EQ(layout.nodes(), 2);
  EXPECT_EQ(layout.host_of(1), "a");
  EXPECT_EQ(layout.host_of(2), "b");
  EXPECT_EQ(layout.local_rank(1), 1);
  EXPECT_EQ(layout.local_rank(2), 0);
  EXPECT_EQ(layout.local_rank(4), 2);
  EXPECT_EQ(layout.describe(), "a: ranks 0-1, b: ranks 2-4");
  // Fewer ranks than slots: the last host's spare slots stay empty; 3 ranks never reach b's
  // second slot and b holds rank 2 alone.
  EXPECT_EQ(NodeLayout::by_slots({{"a", 2}, {"b", 3}}, 3, "h").describe(), "a: ranks 0-1, b: rank 2");
}

TEST(NodeLayout, TooFewSlotsNamesTheHostfile) {
  const std::string message = infeasible_message(
      [] { NodeLayout::by_slots({{"a", 2}, {"b", 1}}, 4, "--hostfile hosts.txt"); });
  EXPECT_TRUE(contains(message, "--hostfile hosts.txt: 3 slots on 2 host(s), but the plan needs 4 ranks"))
      << message;
}

TEST(NodeLayout, UniformAndGatheredHosts) {
  const NodeLayout uniform = NodeLayout::uniform(2, 3);
  EXPECT_EQ(uniform.describe(), "node0: ranks 0-2, node1: ranks 3-5");
  EXPECT_EQ(uniform.local_rank(4), 1);
  // Hosts as ranks report them, interleaved (mpirun --map-by node): node order is that of
  // each host's first rank, local ranks count within the host.
  const NodeLayout gathered = NodeLayout::from_hosts({"x", "y", "x", "y"});
  EXPECT_EQ(gathered.describe(), "x: ranks 0,2, y: ranks 1,3");
  EXPECT_EQ(gathered.local_rank(3), 1);
}

TEST(NodeLayoutCheck, TpInsideNodesPasses) {
  // t2 d2 on 2 nodes of 2: TP groups {0,1} on node0 and {2,3} on node1, the DP pairs
  // {0,2}, {1,3} cross, as they may.
  EXPECT_NO_THROW(check_node_layout(ParallelDims{2, 1, 2}, NodeLayout::uniform(2, 2), false,
                                    "plan.json", "launch"));
  // t2 p2 with pipelines inside a node as well: 4 ranks on one node of 4.
  EXPECT_NO_THROW(check_node_layout(ParallelDims{2, 2, 1}, NodeLayout::uniform(1, 4), true,
                                    "plan.json", "launch"));
}

TEST(NodeLayoutCheck, TpAcrossNodesNamesGroupAndHosts) {
  // t2 on 2 nodes of 1 rank: the one TP group {0, 1} spans node0 and node1.
  const std::string message = infeasible_message([] {
    check_node_layout(ParallelDims{2, 1, 1}, NodeLayout::uniform(2, 1), false, "tiny-tp2.json",
                      "--nodes 2 --ranks-per-node 1");
  });
  EXPECT_TRUE(contains(message, "tiny-tp2.json: the tensor-parallel group of world ranks 0,1 "
                                "would span nodes (0 on node0, 1 on node1), under --nodes 2 "
                                "--ranks-per-node 1 (node0: rank 0, node1: rank 1)"))
      << message;
  // t2 d3 on nodes of 3: the second TP group {2, 3} straddles node0 (0-2) and node1 (3-5).
  const std::string straddle = infeasible_message([] {
    check_node_layout(ParallelDims{2, 1, 3}, NodeLayout::uniform(2, 3), false, "p", "l");
  });
  EXPECT_TRUE(contains(straddle, "world ranks 2,3 would span nodes (2 on node0, 3 on node1)"))
      << straddle;
}

TEST(NodeLayoutCheck, PipelineAcrossNodesOnlyWhenAsked) {
  // t1 p2 on 2 nodes of 1: the pipeline {0, 1} crosses; allowed unless --pp-within-node.
  EXPECT_NO_THROW(check_node_layout(ParallelDims{1, 2, 1}, NodeLayout::uniform(2, 1), false, "p", "l"));
  const std::string message = infeasible_message([] {
    check_node_layout(ParallelDims{1, 2, 1}, NodeLayout::uniform(2, 1), true, "p", "l");
  });
  EXPECT_TRUE(contains(message, "the pipeline group of world ranks 0,1 would span nodes")) << message;
  EXPECT_TRUE(contains(message, "--pp-within-node")) << message;
}

TEST(NodeLayoutCheck, RankCountsMustMatch) {
  // t*p*d = 1*1*2 = 2 against a launch of 3 ranks.
  const std::string message = infeasible_message([] {
    check_node_layout(ParallelDims{1, 1, 2}, NodeLayout::uniform(1, 3), false, "tiny-dp2.json", "mpirun");
  });
  EXPECT_TRUE(contains(message, "tiny-dp2.json: the plan needs tp*pp*dp = 1*1*2 = 2 ranks, but "
                                "mpirun starts 3"))
      << message;
}

TEST(Hostfile, ParsesOpenMpiFormat) {
  const std::vector<HostSlots> hosts = parse_hostfile(
      "# two nodes\n"
      "node-a slots=4 max_slots=8\n"
      "\n"
      "node-b   # one slot: none given\n"
      "node-a slots=2\n",  // listed again: 4 + 2 slots
      "h.txt");
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].host, "node-a");
  EXPECT_EQ(hosts[0].slots, 6);
  EXPECT_EQ(hosts[1].host, "node-b");
  EXPECT_EQ(hosts[1].slots, 1);
}

TEST(Hostfile, RejectsBadSlotsAndEmptyFiles) {
  try {
    parse_hostfile("a slots=2\nb slots=zero\n", "h.txt");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "h.txt:2: 'slots=zero'")) << e.what();
  }
  EXPECT_THROW(parse_hostfile("a slots=0\n", "h.txt"), ConfigError);
  EXPECT_THROW(parse_hostfile("# nothing\n\n", "h.txt"), ConfigError);
  EXPECT_THROW(read_hostfile("/nonexistent/hosts"), ConfigError);
}

TEST(SharedDirProbe, NamesHostsThatDoNotSeeEachOther) {
  const NodeLayout layout = NodeLayout::from_hosts({"a", "a", "b"});
  // Everyone sees everything: no message.
  const std::vector<std::vector<bool>> all(3, std::vector<bool>(3, true));
  EXPECT_EQ(unshared_dir_message("--out", "/o", all, layout), "");
  // A node-local /o: a's ranks see only a's probes, b's only b's.
  const std::vector<std::vector<bool>> local = {
      {true, true, false}, {true, true, false}, {false, false, true}};
  const std::string message = unshared_dir_message("--out", "/o", local, layout);
  EXPECT_TRUE(contains(message, "--out '/o': not one directory for every rank (a: ranks 0-1, b: "
                                "rank 2): host a does not see what host b writes there; host b "
                                "does not see what host a writes there"))
      << message;
}

}  // namespace
}  // namespace strata
