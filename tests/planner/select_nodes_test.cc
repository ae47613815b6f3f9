// `strata select` on several nodes (planner/select.h): where the scheduler puts a job is where
// its prediction priced it. Hand-made ways on 2 and 3 nodes whose placements are worked out
// below (a way that fits a node never split; a wider one on whole nodes, ranks node by node;
// an lrtf job's steps on one node), and the cost model's side on local-cpu reshaped to 2 nodes
// of 2: ways inside a node priced as on one node, the 4-device way on the inter-node link.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/train_spec.h"
#include "planner/select.h"
#include "tests/planner/select_jobs.h"

namespace strata {
namespace {

using Devices = std::vector<std::int64_t>;

using testing_support::job;
using testing_support::way;

const ScheduleSlice& only_slice(const SelectSchedule& s, std::size_t job) {
  const auto it = std::find_if(s.slices.begin(), s.slices.end(),
                               [&](const ScheduleSlice& x) { return x.job == job; });
  EXPECT_NE(it, s.slices.end()) << "job " << job;
  EXPECT_EQ(std::count_if(s.slices.begin(), s.slices.end(),
                          [&](const ScheduleSlice& x) { return x.job == job; }), 1) << job;
  return *it;
}

TEST(SelectNodes, DeviceNumbersGoNodeByNode) {
  // 6 devices of 4 per node: node 0 holds 0-3, node 1 holds 4-5 (its local 0-1).
  const SelectDevices layout{6, 4};
  EXPECT_EQ(layout.nodes(), 2);
  EXPECT_EQ(layout.node_of(3), 0);
  EXPECT_EQ(layout.node_of(4), 1);
  EXPECT_EQ(layout.local_of(5), 1);
  // Without a node size every device is on node 0.
  EXPECT_EQ((SelectDevices{3, 0}).nodes(), 1);
  EXPECT_EQ((SelectDevices{3, 0}).node_of(2), 0);
}

TEST(SelectNodes, AJobThatFitsANodeIsNeverSplit) {
  // 2 nodes of 2 devices; one way each: L 1 device 5 s, M 1 device 1 s, N 2 devices 4 s,
  // K 2 devices 1 s. In job order: L on node 0 (all free, lower node) device 0, 0-5; M on
  // node 0 too (device 1 free at 0 ties node 1's, lower node wins), 0-1; N needs both devices
  // of a node: node 0 is free at 5, node 1 at 0: devices 2,3, 0-4; K: node 0 at 5, node 1 at
  // 4: devices 2,3, 4-5. Makespan 5 = the bound's longest job (L), so no later order beats it.
  // Blind to nodes, K would take the two devices free first, 1 (free at 1) and 2 (at 4): a
  // 2-device way priced inside a node, split over two.
  const std::vector<Job> jobs{job("L", 5), job("M", 5), job("N", 5), job("K", 5)};
  const std::vector<JobWays> ways{{{way(1, 5.0, 5)}}, {{way(1, 1.0, 5)}},
                                  {{way(2, 4.0, 5)}}, {{way(2, 1.0, 5)}}};
  const SelectSchedule s = schedule_jobs(jobs, ways, {4, 2}, SelectPolicy::kStrata);
  EXPECT_DOUBLE_EQ(s.makespan_s, 5.0);
  EXPECT_DOUBLE_EQ(s.lower_bound_s, 5.0);
  EXPECT_EQ(only_slice(s, 0).devices, (Devices{0}));
  EXPECT_EQ(only_slice(s, 1).devices, (Devices{1}));
  EXPECT_EQ(only_slice(s, 2).devices, (Devices{2, 3}));
  EXPECT_EQ(only_slice(s, 3).devices, (Devices{2, 3}));
  EXPECT_DOUBLE_EQ(only_slice(s, 3).start_s, 4.0);
  EXPECT_EQ(s.layout.nodes(), 2);
}

TEST(SelectNodes, AJobWiderThanANodeTakesWholeNodesRanksNodeByNode) {
  // 3 nodes of 2 devices. L: 1 device 3 s; W: 4 devices 2 s; S: 2 devices 1 s. In job order:
  // L on node 0 device 0, 0-3; W needs two whole nodes: node 0 is free at 3, nodes 1 and 2 at
  // 0: devices 2,3 then 4,5 (rank r on its (r / 2)-th node), 0-2; S: node 0 at 3 (device 0
  // busy), node 1 at 2, node 2 at 2: node 1, devices 2,3, 2-3. Makespan 3 = L's duration, the
  // bound. Blind to nodes, W would take devices 1-4: half of node 0, node 1, half of node 2.
  const std::vector<Job> jobs{job("L", 3), job("W", 2), job("S", 1)};
  const std::vector<JobWays> ways{{{way(1, 3.0, 3)}}, {{way(4, 2.0, 2)}}, {{way(2, 1.0, 1)}}};
  const SelectSchedule s = schedule_jobs(jobs, ways, {6, 2}, SelectPolicy::kStrata);
  EXPECT_DOUBLE_EQ(s.makespan_s, 3.0);
  EXPECT_EQ(only_slice(s, 0).devices, (Devices{0}));
  EXPECT_EQ(only_slice(s, 1).devices, (Devices{2, 3, 4, 5}));
  EXPECT_DOUBLE_EQ(only_slice(s, 1).start_s, 0.0);
  EXPECT_EQ(only_slice(s, 2).devices, (Devices{2, 3}));
  EXPECT_DOUBLE_EQ(only_slice(s, 2).start_s, 2.0);
  // Sequential: each job on all 6 devices in device order, which is node by node.
  const std::vector<JobWays> all{{{way(6, 1.0, 3)}}, {{way(6, 1.0, 2)}}, {{way(6, 1.0, 1)}}};
  for (const ScheduleSlice& slice : schedule_jobs(jobs, all, {6, 2}, SelectPolicy::kSequential).slices) {
    EXPECT_EQ(slice.devices, (Devices{0, 1, 2, 3, 4, 5}));
  }
}

TEST(SelectNodes, AnLrtfJobStaysOnTheNodeOfItsFirstStep) {
  // 2 nodes of 1 device; A: 3 steps of 1 s, B: 1 step of 1 s, both spilled. t=0: device 0
  // takes A (3 s left), device 1 takes B. t=1: device 0 takes A's second step (A is free at
  // 1); device 1 (node 1) has no job of its own left: A is node 0's, so it stops, where blind
  // to nodes it would take A's third step at 2 and move A's host state to node 1. A's steps
  // end on device 0 at 3.
  const std::vector<Job> jobs{job("A", 3), job("B", 1)};
  const std::vector<JobWays> ways{{{way(1, 3.0, 3, true)}}, {{way(1, 1.0, 1, true)}}};
  const SelectSchedule s = schedule_jobs(jobs, ways, {2, 1}, SelectPolicy::kLrtf);
  EXPECT_DOUBLE_EQ(s.makespan_s, 3.0);
  std::int64_t a_steps = 0;
  for (const ScheduleSlice& slice : s.slices) {
    if (slice.job != 0) continue;
    EXPECT_EQ(slice.devices, (Devices{0}));
    a_steps += slice.steps;
  }
  EXPECT_EQ(a_steps, 3);
}

// The cost model's side, on local-cpu reshaped to 2 nodes of 2 devices and all 4 used.
class SelectNodesPricing : public ::testing::Test {
 protected:
  void SetUp() override {
    // A path, not a string concatenation: GCC 12's -Warray-bounds false positive.
    const std::filesystem::path configs = std::filesystem::path(STRATA_SOURCE_DIR) / "configs";
    base_ = ClusterSpec::load(configs / "clusters" / "local-cpu.json");
    job_.name = "tiny";
    job_.model = ModelSpec::load(configs / "models" / "tiny.json");
    job_.train = TrainSpec::load(configs / "train" / "tiny.json");
    job_.train.steps = 10;
  }
  std::vector<JobWays> ways_on(const ClusterSpec& cluster, std::int64_t devices) const {
    SelectOptions options;
    options.devices = devices;
    return job_ways({job_}, cluster, options);
  }
  static const JobWay* unspilled_way_of(const JobWays& ways, std::int64_t devices) {
    for (const JobWay& w : ways.ways) {
      if (w.devices == devices && !w.spilled) return &w;
    }
    return nullptr;
  }
  ClusterSpec base_;
  Job job_;
};

TEST_F(SelectNodesPricing, WaysInsideANodeArePricedAsOnOneNodeAndWiderOnesOnTheInterNodeLink) {
  const ClusterSpec two_nodes = with_shape(base_, {2, 2});
  ClusterSpec slow_link = two_nodes;  // the inter-node link 100x slower, latency 100x longer
  slow_link.inter_node.bandwidth_bytes_per_s /= 100;
  slow_link.inter_node.latency_s *= 100;
  const JobWays fast = ways_on(two_nodes, 4).front();
  const JobWays slow = ways_on(slow_link, 4).front();
  // Ways of 1, 2 and 4 devices (3 spans nodes without filling them: not a legal request).
  for (std::int64_t k : {1, 2, 4}) {
    ASSERT_NE(unspilled_way_of(fast, k), nullptr) << k;
    ASSERT_NE(unspilled_way_of(slow, k), nullptr) << k;
  }
  EXPECT_EQ(unspilled_way_of(fast, 3), nullptr);
  // Inside a node the inter-node link is unused: the same price on either cluster, and no
  // inter-node share.
  for (std::int64_t k : {1, 2}) {
    EXPECT_EQ(unspilled_way_of(fast, k)->step_s, unspilled_way_of(slow, k)->step_s) << k;
    EXPECT_FALSE(unspilled_way_of(fast, k)->prediction.inter_node_comm_s.has_value()) << k;
  }
  // 4 devices span both nodes (no TP group of 4 fits a node of 2, so a DP or PP group
  // crosses): its prediction carries the inter-node share and slows with the link.
  const JobWay& wide = *unspilled_way_of(fast, 4);
  EXPECT_TRUE(wide.prediction.inter_node_comm_s.has_value());
  EXPECT_LE(wide.plan.tp, 2);
  EXPECT_GT(unspilled_way_of(slow, 4)->step_s, wide.step_s);
  // A node holds 2 busy devices of the 4: a 1-device way is priced as on one node of 2 with
  // both devices in use (CostModelOptions::node_ranks = min(D, G)).
  const JobWays one_node = ways_on(with_shape(base_, {1, 2}), 2).front();
  EXPECT_EQ(unspilled_way_of(fast, 1)->step_s, unspilled_way_of(one_node, 1)->step_s);
}

}  // namespace
}  // namespace strata
