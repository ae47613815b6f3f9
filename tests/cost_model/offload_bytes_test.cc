// cost_model's offload_transfer_bytes worked by hand for the tiny model (8 layers, h = 64,
// V = 256, s = 64): per TP rank a layer has 12 h^2 + 13 h = 49,984 parameters, the embedding
// V h + s h = 20,480, the final norm 2 h = 128 (stage_params). The executor's measured bytes
// are checked against the same function in tests/executor/offload_engine_test.cc.
#include <gtest/gtest.h>

#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/pricing/time_model.h"
#include "cost_model/specs/train_spec.h"
#include "tests/cost_model/bundled_configs.h"

namespace strata {
namespace {

using testing::bundled_cluster;
using testing::bundled_model;
using testing::bundled_train;

TEST(OffloadBytes, Zero3ParamsOnHostSingleRank) {
  Plan plan;
  plan.micro_batch = 2;  // m = 8 / 2 = 4
  plan.zero_stage = 3;
  plan.offload.params = OffloadTier::kCpu;
  const TransferBytes t = offload_transfer_bytes(bundled_model("tiny"), plan, bundled_train("tiny"), 0);
  // Gathers: a layer 2m = 8, the embedding 2m = 8 (p = 1: also the head's wte), the norm 8:
  //   8 x (8 x 49,984 + 20,480 + 128) x 4 = 13,455,360 bytes up;
  // device optimizer: every shard up and down once: (8 x 49,984 + 20,608) x 4 = 1,681,920.
  EXPECT_EQ(t.host_to_device, 13455360.0 + 1681920.0);
  EXPECT_EQ(t.device_to_host, 1681920.0);
  EXPECT_EQ(t.host_to_nvme, 0.0);
  EXPECT_EQ(t.nvme_to_host, 0.0);
}

TEST(OffloadBytes, Zero3AllOnNvmeSingleRank) {
  Plan plan;
  plan.micro_batch = 2;  // m = 4
  plan.zero_stage = 3;
  plan.offload = {OffloadTier::kNvme, OffloadTier::kNvme, OffloadTier::kNvme};
  const TransferBytes t = offload_transfer_bytes(bundled_model("tiny"), plan, bundled_train("tiny"), 0);
  const double all = 420480 * 4.0;  // 8 x 49,984 + 20,608 parameters, 4 bytes each
  const double layers = 8 * 49984 * 4.0;
  // Up: the gathers' 13,455,360 (above). Down: layer gradients m = 4 times, the rest once.
  EXPECT_EQ(t.host_to_device, 13455360.0);
  EXPECT_EQ(t.device_to_host, 4 * layers + (all - layers));
  // NVMe: gradients written as often as sent down, read k - 1 + 1 times (the same); params
  // read per gather; CPU AdamW reads and writes params (the master), m and v once.
  EXPECT_EQ(t.host_to_nvme, (4 * layers + (all - layers)) + 3 * all);
  EXPECT_EQ(t.nvme_to_host, (4 * layers + (all - layers)) + 13455360.0 + 3 * all);
}

TEST(OffloadBytes, ShardsArePaddedToTheDataParallelDegree) {
  Plan plan;
  plan.dp = 3;
  plan.zero_stage = 2;
  plan.offload.gradients = OffloadTier::kCpu;
  TrainSpec train = bundled_train("tiny");
  train.global_batch = 6;  // m = 6 / 3 = 2
  const TransferBytes t = offload_transfer_bytes(bundled_model("tiny"), plan, train, 0);
  // Shards: ceil(49,984 / 3) = 16,662, ceil(20,480 / 3) = 6,827, ceil(128 / 3) = 43.
  // Down: layers m = 2 times, the others once: (2 x 8 x 16,662 + 6,827 + 43) x 4 = 1,093,848.
  EXPECT_EQ(t.device_to_host, 1093848.0);
  // Up for the device optimizer: every shard once: (8 x 16,662 + 6,870) x 4 = 560,664.
  EXPECT_EQ(t.host_to_device, 560664.0);
  EXPECT_TRUE(t.host_to_nvme == 0 && t.nvme_to_host == 0);
}

TEST(OffloadBytes, OptimizerOffloadAtZero0MovesTheWholeModelOnce) {
  Plan plan;
  plan.pp = 2;  // rank 1: layers 4..7, the tied wte copy V h / t = 16,384 and the final norm
  plan.offload.optimizer = OffloadTier::kCpu;
  const TransferBytes t = offload_transfer_bytes(bundled_model("tiny"), plan, bundled_train("tiny"), 1);
  const double params = 4 * 49984 + 16384 + 128;  // 216,448
  EXPECT_EQ(t.device_to_host, params * 4);  // gradients down
  EXPECT_EQ(t.host_to_device, params * 4);  // updated params up
  EXPECT_TRUE(t.host_to_nvme == 0 && t.nvme_to_host == 0);
  Plan none;
  EXPECT_TRUE(offload_transfer_bytes(bundled_model("tiny"), none, bundled_train("tiny"), 0).empty());
}

}  // namespace
}  // namespace strata
