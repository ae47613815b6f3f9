// The planner, sizing and select rank only plans that `strata run` accepts: over every
// bundled cluster, at node counts 1-4 of 4 and of 8 GPUs (and at the file's own shape), and
// every bundled model with its training setup, each plan they rank is passed through run's
// own checks of a plan (executor/runtime/plan_checks.h: the model and batch rules, what the
// executor on the cluster's backend trains, the Program's deadlock freedom), run's check of
// the ranks' layout on the nodes they fill in order (executor/comm/node_layout.h, the layout
// of `strata run --nodes N --ranks-per-node G`), and run's fit check (the prediction within
// the cluster's memory). Before backend_facts.h, `plan --model (6 heads) --nodes 3
// --gpus-per-node 4` ranked t3 first, which run refuses (ranks 3,4,5 span two nodes), and
// the CUDA clusters were offered plans whose head size or row widths the CUDA kernels refuse.
// The search options are narrowed (top 3, b <= 2, v <= 2) to keep the test to seconds: the
// property is of every plan ranked, whatever the options.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/partition.h"
#include "cost_model/program/program.h"
#include "executor/comm/node_layout.h"
#include "executor/runtime/plan_checks.h"
#include "planner/planner.h"
#include "planner/select.h"
#include "planner/sizing.h"
#include "tests/cost_model/bundled_configs.h"

namespace strata {
namespace {

using testing::bundled_cluster;
using testing::bundled_model;
using testing::bundled_names;
using testing::bundled_train;

// The training setup each model is searched with: tiny.json for the tiny models, in bf16 on
// a CUDA cluster (the CUDA backend trains bf16 alone: in fp32 no plan would be offered and
// the CUDA shape limits would go untested); gpt-8b.json (global batch 64, bf16) for the rest,
// whose own global batches (up to 3072) only make the search slower: the facts checked
// (placement, the backend's limits, deadlock freedom) are the same at any batch.
TrainSpec train_for(const std::string& model, const ClusterSpec& cluster) {
  const bool tiny = model.rfind("tiny", 0) == 0;
  TrainSpec train = bundled_train(tiny ? "tiny" : "gpt-8b");
  if (cluster.backend == Backend::kCuda) train.precision = Precision::kBf16;
  return train;
}

// Every bundled cluster at 1-4 nodes of 4 and of 8 GPUs (those the file's links allow:
// with_shape refuses several nodes without an inter-node link).
std::vector<ClusterSpec> shapes_of(const std::string& cluster) {
  const ClusterSpec file = bundled_cluster(cluster);
  std::vector<ClusterSpec> out;
  for (const std::int64_t g : {4, 8}) {
    for (std::int64_t nodes = 1; nodes <= 4; ++nodes) {
      try {
        out.push_back(with_shape(file, ClusterShape{nodes, g}));
      } catch (const ConfigError&) {
      }
    }
  }
  return out;
}

// run's checks of `plan` on `cluster`'s backend with its ranks filling nodes of `per_node`
// in order (`strata run --nodes N --ranks-per-node G`), and run's fit check: "" when
// accepted, else what refused it.
std::string run_refuses(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                        const ClusterSpec& cluster, std::int64_t per_node) {
  const std::int64_t world = plan.world_size();
  try {
    check_plan_runs(model, train, plan, cluster.backend, kDefaultPrefetchDepth, plan.label());
    const NodeLayout layout = world <= per_node
                                  ? NodeLayout::uniform(1, static_cast<int>(world))
                                  : NodeLayout::uniform(static_cast<int>(world / per_node),
                                                        static_cast<int>(per_node));
    check_node_layout(parallel_dims(plan), layout, false, plan.label(), "--nodes");
  } catch (const std::exception& e) {
    return e.what();
  }
  if (!memory_overshoot(predict(model, cluster, train, plan), cluster, world).fits()) {
    return plan.label() + ": does not fit";
  }
  return "";
}

std::string where(const ClusterSpec& c, const std::string& model) {
  return fmt::format("{} ({} x {}), model {}", c.name, c.nodes, c.gpus_per_node, model);
}

PlannerOptions narrow() {
  PlannerOptions o;
  o.top_k = 3;
  o.max_micro_batch = 2;
  o.max_virtual_stages = 2;
  o.threads = 1;  // ctest runs the clusters' tests side by side
  return o;
}

class RunnablePlans : public ::testing::TestWithParam<std::string> {};

ClusterSpec two_nodes_of_four(const std::string& cluster) {
  return with_shape(bundled_cluster(cluster), ClusterShape{2, 4});
}

// `strata plan`: every bundled model on every shape of the cluster.
TEST_P(RunnablePlans, EveryPlanTheSearchRanksRuns) {
  std::int64_t checked = 0;
  for (const ClusterSpec& cluster : shapes_of(GetParam())) {
    for (const std::string& name : bundled_names("models")) {
      const ModelSpec model = bundled_model(name);
      const TrainSpec train = train_for(name, cluster);
      for (const ScoredPlan& p : search_plans(model, cluster, train, narrow()).top) {
        ++checked;
        EXPECT_EQ(run_refuses(model, train, p.plan, cluster, cluster.gpus_per_node), "")
            << where(cluster, name);
      }
    }
  }
  // Not vacuous: every bundled cluster has models that fit some of its shapes.
  EXPECT_GT(checked, 20);
}

// The models small enough that sizing and select find ways on a few nodes, of each kind of
// fact: head size 16 (tiny: refused by the CUDA kernels), 64 (tiny-gpu, gpt2-124m), grouped
// KV heads (tiny-llama, llama3.2-1b).
const char* const kSmallModels[] = {"tiny", "tiny-gpu", "tiny-llama", "gpt2-124m", "llama3.2-1b"};

// `strata plan --tokens`: each row's best plan, on 2 nodes of 4 (sizing tries 4 and 8).
TEST_P(RunnablePlans, EverySizingRowRuns) {
  std::int64_t checked = 0;
  const ClusterSpec cluster = two_nodes_of_four(GetParam());
  for (const char* name : kSmallModels) {
    const ModelSpec model = bundled_model(name);
    const TrainSpec train = train_for(name, cluster);
    // One token in 1e9 s: every count meets it, so the sizing walks down from 8 GPUs
    // toward the fewest, a row each.
    const SizingResult sizing =
        size_for_deadline(model, cluster, train, narrow(), SizingRequest{1.0, 1e9, 0});
    for (const SizingTry& t : sizing.tries) {
      if (!t.fits()) continue;
      ++checked;
      EXPECT_EQ(run_refuses(model, train, t.best().plan, cluster, cluster.gpus_per_node), "")
          << where(cluster, name) << ", " << t.gpus << " GPUs";
    }
  }
  EXPECT_GT(checked, 0);
}

// `strata select`: every way of every job on 2 nodes of 4 devices (a way of k <= 4 devices
// runs inside one node; of 8, on both: select.h), the spilled single-device way included.
TEST_P(RunnablePlans, EverySelectWayRuns) {
  std::int64_t checked = 0;
  const ClusterSpec cluster = two_nodes_of_four(GetParam());
  for (const char* name : kSmallModels) {
    Job job;
    job.name = name;
    job.model = bundled_model(name);
    job.train = train_for(name, cluster);
    job.train.steps = 10;
    SelectOptions options;
    options.devices = cluster.total_gpus();
    options.max_micro_batch = 2;
    std::vector<JobWays> ways;
    try {
      ways = job_ways({job}, cluster, options);
    } catch (const InfeasiblePlan&) {
      continue;  // no way at all: nothing offered
    }
    for (const JobWay& w : ways.front().ways) {
      ++checked;
      const std::int64_t per_node = std::min(w.devices, cluster.gpus_per_node);
      EXPECT_EQ(run_refuses(job.model, job.train, w.plan, cluster, per_node), "")
          << where(cluster, name) << ", a way on " << w.devices << " devices";
    }
  }
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(BundledClusters, RunnablePlans, ::testing::ValuesIn(bundled_names("clusters")),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace strata
