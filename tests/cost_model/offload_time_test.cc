// The offload terms of the time model are the offload bytes (offload_traffic, the bytes
// offload_transfer_bytes reports and the executor measures) over the link rates, and
// predict() carries those bytes as its "transfers" (per link, the worst pipeline rank).
// Model: configs/models/tiny.json (per TP rank a layer has 49,984 parameters, the embedding
// 20,480, the tied wte copy 16,384, the final norm 128: offload_bytes_test.cc), fp32 training
// (configs/train/tiny.json, 8 sequences a step), so 4 bytes per element on every link.
// Cluster: configs/clusters/selene-a100.json: PCIe 25 GB/s each way per GPU, NVMe 24 GB/s read
// and 12 GB/s write per node, shared by the plan's GPUs on the node (2 here).
#include <gtest/gtest.h>

#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/model_spec.h"
#include "cost_model/plan.h"
#include "cost_model/time_model.h"
#include "cost_model/train_spec.h"

namespace strata {
namespace {

ModelSpec tiny() { return ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/tiny.json"); }
TrainSpec tiny_train() {
  return TrainSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/train/tiny.json");
}
ClusterSpec selene() {
  return ClusterSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/clusters/selene-a100.json");
}

constexpr double kPcie = 25e9;
constexpr double kNvmeRead = 24e9 / 2;   // the node's NVMe shared by the plan's 2 GPUs
constexpr double kNvmeWrite = 12e9 / 2;

// Optimizer state on NVMe at ZeRO 0, two pipeline stages (d = 1, m = 8).
TEST(OffloadTime, OptimizerOnNvmeTailIsBytesOverRates) {
  const ModelSpec model = tiny();
  const ClusterSpec cluster = selene();
  const TrainSpec train = tiny_train();
  Plan plan;
  plan.pp = 2;
  plan.micro_batch = 1;
  plan.offload.optimizer = OffloadTier::kNvme;
  const TimeContext ctx = make_time_context(model, cluster, train, plan, nullptr, LayerKernels{});
  ASSERT_EQ(ctx.ranks_per_node, 2);
  // Rank 1: 4 layers + the tied wte copy + the final norm = 216,448 parameters x 4 bytes =
  // 865,792 bytes. Gradients down once, updated params up once; master params, m and v each
  // read and written once on NVMe: 3 x 865,792 each way.
  const double part = 216448 * 4.0;
  const TailWork tail = tail_work(ctx, 1, 216448, 1.0);
  EXPECT_DOUBLE_EQ(tail.d2h_s, part / kPcie);                     // 34.6 us
  EXPECT_DOUBLE_EQ(tail.h2d_s, part / kPcie);
  EXPECT_DOUBLE_EQ(tail.nvme_s, 3 * part / kNvmeWrite + 3 * part / kNvmeRead);  // 649 us
  // Pipelined with the CPU step: only the NVMe I/O's excess over it is exposed, plus the
  // params' copy up; the gradients' copy down hides in the 1 s window but for its last
  // bucket, which is larger than the whole 866 kB, so it is exposed whole.
  EXPECT_DOUBLE_EQ(tail.offload_exposed_s,
                   tail.d2h_s + std::max(tail.nvme_s - tail.cpu_step_s, 0.0) + tail.h2d_s);

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
TEST(OffloadTime, Zero3ParamsOnNvmeFetchAndTailAreBytesOverRates) {
  const ModelSpec model = tiny();
  const ClusterSpec cluster = selene();
  const TrainSpec train = tiny_train();
  Plan plan;
  plan.dp = 2;
  plan.micro_batch = 2;
  plan.zero_stage = 3;
  plan.offload.params = OffloadTier::kNvme;
  plan.recompute = Recompute::kFull;
  const TimeContext ctx = make_time_context(model, cluster, train, plan, nullptr, LayerKernels{});
  ASSERT_EQ(ctx.micro_batches, 2);
  // Shards (d = 2): a layer 24,992, the embedding 10,240, the norm 64: 8 x 24,992 + 10,304 =
  // 210,240 parameters, 840,960 bytes. Gathers per step: 2m = 4 of each unit (p = 1: the
  // embedding is also the head's wte), so 4 x 840,960 = 3,363,840 bytes up from NVMe and over
  // PCIe; one pass of the one chunk (2m v = 4 passes) fetches a quarter: 840,960 bytes.
  const double shard_bytes = 210240 * 4.0;
  const TransferBytes all = offload_transfer_bytes(model, plan, train, 0);
  EXPECT_EQ(all.nvme_to_host, 4 * shard_bytes + shard_bytes);  // + the device optimizer's read
  const ChunkWork w = chunk_work(ctx, 0, 0);
  EXPECT_EQ(w.fetch_pass.host_to_device, shard_bytes);
  EXPECT_EQ(w.fetch_pass.nvme_to_host, shard_bytes);
  // Read from NVMe, then copied up: the times add. 33.6 us + 70.1 us.
  EXPECT_DOUBLE_EQ(w.zero3.fetch_pass_s, shard_bytes / kPcie + shard_bytes / kNvmeRead);
  // Full recompute gathers twice over the DP group but reuses the backward's fetched shard:
  // one fetch per pass (offload_transfer_bytes counts 2m fetches a layer, not 3m).
  ASSERT_EQ(w.zero3.backward_gathers, 2);
  EXPECT_DOUBLE_EQ(w.zero3.backward_comm_s,
                   2 * w.zero3.gather_pass_s + w.zero3.fetch_pass_s + w.zero3.reduce_scatter_s);

  // The device optimizer's round trip: every shard down and up once over PCIe, written to and
  // read from NVMe once.
  const TailWork tail = tail_work(ctx, 0, w.params, 1.0);
  EXPECT_DOUBLE_EQ(tail.d2h_s, shard_bytes / kPcie);
  EXPECT_DOUBLE_EQ(tail.h2d_s, shard_bytes / kPcie);
  EXPECT_DOUBLE_EQ(tail.nvme_s, shard_bytes / kNvmeWrite + shard_bytes / kNvmeRead);
  EXPECT_EQ(tail.cpu_step_s, 0.0);

  const Prediction p = predict(model, cluster, train, plan, nullptr);
  EXPECT_EQ(p.transfers, all);  // one pipeline rank
  Plan none = plan;
  none.offload = OffloadPlan{};
  EXPECT_TRUE(predict(model, cluster, train, none, nullptr).transfers.empty());
}

}  // namespace
}  // namespace strata
