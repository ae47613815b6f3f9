// The offload ops of the Program are priced from the offload bytes (unit_offload_bytes, whose
// sum over a step is offload_traffic: the bytes offload_transfer_bytes reports and the
// executor measures) over the link rates, and predict() carries those bytes as its
// "transfers" (per link, the worst pipeline rank).
// Model: configs/models/tiny.json (per TP rank a layer has 49,984 parameters, the embedding
// 20,480, the tied wte copy 16,384, the final norm 128: offload_bytes_test.cc), fp32 training
// (configs/train/tiny.json, 8 sequences a step), so 4 bytes per element on every link.
// Cluster: configs/clusters/selene-a100.json: PCIe 25 GB/s each way per GPU, NVMe 24 GB/s read
// and 12 GB/s write per node, shared by the plan's GPUs on the node (2 here).
#include <gtest/gtest.h>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/pricing/op_costs.h"
#include "cost_model/specs/plan.h"
#include "cost_model/pricing/time_model.h"
#include "cost_model/specs/train_spec.h"
#include "tests/cost_model/bundled_configs.h"

namespace strata {
namespace {

using testing::bundled_cluster;
using testing::bundled_model;
using testing::bundled_train;

constexpr double kPcie = 25e9;
constexpr double kNvmeRead = 24e9 / 2;   // the node's NVMe shared by the plan's 2 GPUs
constexpr double kNvmeWrite = 12e9 / 2;

// The offload seconds of a rank's tail (its optimizer steps' and gradient offloads') and of
// the optimizer steps in its backward bodies (the optimizer on the host, no clipping:
// program.h), each once.
double steps_and_tail_offload_s(const TimeModelCosts& costs, const RankProgram& rank) {
  double s = 0;
  for (std::size_t i = static_cast<std::size_t>(rank.tail_begin); i < rank.ops.size(); ++i) {
    s += costs.tail(rank, rank.ops[i]).offload_s;
  }
  for (const PassBody& body : rank.bodies) {
    for (const ProgramOp& op : body.ops) {
      if (op.kind == ProgramOpKind::kOptimizerStep) {
        s += costs.state_move(rank, op.kind, op.unit).offload_s;
      }
    }
  }
  return s;
}

// Optimizer state on NVMe at ZeRO 0, two pipeline stages (d = 1, m = 8).
TEST(OffloadTime, OptimizerOnNvmeStepsAreBytesOverRates) {
  const ModelSpec model = bundled_model("tiny");
  const ClusterSpec cluster = bundled_cluster("selene-a100");
  const TrainSpec train = bundled_train("tiny");
  Plan plan;
  plan.pp = 2;
  plan.micro_batch = 1;
  plan.offload.optimizer = OffloadTier::kNvme;
  const TimeContext ctx = make_time_context(model, cluster, train, plan, nullptr, LayerKernels{});
  ASSERT_EQ(ctx.ranks_per_node, 2);
  const TimeModelCosts costs(ctx);
  const Program program = make_program(model, train, plan);
  // Rank 1: 4 layers + the tied wte copy + the final norm = 216,448 parameters x 4 bytes =
  // 865,792 bytes. Its optimizer steps send the gradients down once and bring the updated
  // params up once (34.6 us each way); master params, m and v are each read and written once
  // on NVMe (3 x 865,792 each way, 649 us), pipelined with the CPU step, of which only the
  // excess is exposed. Each unit's step is exposed the same way, so the sums add up.
  const double part = 216448 * 4.0;
  const double nvme = 3 * part / kNvmeWrite + 3 * part / kNvmeRead;
  const double cpu = cpu_optimizer_s(ctx, 216448);
  EXPECT_NEAR(steps_and_tail_offload_s(costs, program.ranks[1]), 2 * part / kPcie + (nvme - cpu), 1e-12);
  EXPECT_GT(nvme, cpu);

  // predict()'s transfers: per link the worst rank, here rank 0 (4 layers + the 20,480-
  // parameter embedding = 220,416 parameters), equal to offload_transfer_bytes of that rank.
  const Prediction p = predict(model, cluster, train, plan, nullptr);
  EXPECT_EQ(p.transfers, offload_transfer_bytes(model, plan, train, 0));
  EXPECT_EQ(p.transfers.device_to_host, 220416 * 4.0);
  EXPECT_EQ(p.transfers.host_to_nvme, 3 * 220416 * 4.0);
  EXPECT_NE(p.transfers, offload_transfer_bytes(model, plan, train, 1));
}

// ZeRO-3 with the parameters on NVMe, the optimizer on the device, full recompute, d = 2, b = 2: m = 8 /
// (2 x 2) = 2 micro-batches.
TEST(OffloadTime, Zero3ParamsOnNvmeFetchesAndTailAreBytesOverRates) {
  const ModelSpec model = bundled_model("tiny");
  const ClusterSpec cluster = bundled_cluster("selene-a100");
  const TrainSpec train = bundled_train("tiny");
  Plan plan;
  plan.dp = 2;
  plan.micro_batch = 2;
  plan.zero_stage = 3;
  plan.offload.params = OffloadTier::kNvme;
  plan.recompute = Recompute::kFull;
  const TimeContext ctx = make_time_context(model, cluster, train, plan, nullptr, LayerKernels{});
  ASSERT_EQ(ctx.micro_batches, 2);
  const TimeModelCosts costs(ctx);
  const Program program = make_program(model, train, plan);
  const RankProgram& rank = program.ranks[0];
  // Shards (d = 2): a layer 24,992, the embedding 10,240, the norm 64: 8 x 24,992 + 10,304 =
  // 210,240 parameters, 840,960 bytes. Gathers per step: 2m = 4 of each unit (p = 1: the
  // embedding is also the head's wte), so 4 x 840,960 = 3,363,840 bytes up from NVMe and over
  // PCIe, one unit's shard per fetch: read from NVMe, then copied up (the times add).
  const double shard_bytes = 210240 * 4.0;
  const TransferBytes all = offload_transfer_bytes(model, plan, train, 0);
  EXPECT_EQ(all.nvme_to_host, 4 * shard_bytes + shard_bytes);  // + the device optimizer's read
  const double layer_shard = 24992 * 4.0;
  EXPECT_DOUBLE_EQ(costs.state_move(rank, ProgramOpKind::kFetch, rank.unit_index("layer3")).offload_s,
                   layer_shard / kPcie + layer_shard / kNvmeRead);  // 4.0 + 8.3 us

  // The device optimizer's round trip, in its steps: every shard down and up once over PCIe,
  // written to and read from NVMe once.
  EXPECT_NEAR(steps_and_tail_offload_s(costs, rank),
              2 * shard_bytes / kPcie + shard_bytes / kNvmeWrite + shard_bytes / kNvmeRead, 1e-12);

  const Prediction p = predict(model, cluster, train, plan, nullptr);
  EXPECT_EQ(p.transfers, all);  // one pipeline rank
  Plan none = plan;
  none.offload = OffloadPlan{};
  EXPECT_TRUE(predict(model, cluster, train, none, nullptr).transfers.empty());
}

}  // namespace
}  // namespace strata
