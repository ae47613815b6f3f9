// The CPU backend's calibrated time model (compute_model.h): ranks sharing the cores, GEMM
// samples kept as measured, attention at the measured rate, backward from backward shapes,
// the elementwise byte counts the calibration divides by.
#include <gtest/gtest.h>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/pricing/compute_model.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/pricing/op_costs.h"
#include "cost_model/specs/plan.h"
#include "cost_model/pricing/time_model.h"
#include "cost_model/specs/train_spec.h"
#include "tests/cost_model/bundled_configs.h"

namespace strata {
namespace {

using testing::bundled_model;

ClusterSpec local_cpu() {
  return ClusterSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/clusters/local-cpu.json");
}
LayerKernels cpu_kernels() {
  LayerKernels k;
  k.attention = AttentionKernel::kMaterialized;
  k.separate_bias = true;
  return k;
}

TEST(CpuShare, RanksShareTheNodesCores) {
  const ClusterSpec cpu = local_cpu();  // 2 cores
  Profile one_thread;
  one_thread.threads_per_rank = 1;
  // min(1, cores / (ranks x threads)): 2 / 1, 2 / 2, 2 / 4, 2 / 8.
  EXPECT_DOUBLE_EQ(cpu_compute_share(cpu, &one_thread, 1), 1.0);
  EXPECT_DOUBLE_EQ(cpu_compute_share(cpu, &one_thread, 2), 1.0);
  EXPECT_DOUBLE_EQ(cpu_compute_share(cpu, &one_thread, 4), 0.5);
  EXPECT_DOUBLE_EQ(cpu_compute_share(cpu, &one_thread, 8), 0.25);
  Profile two_threads;
  two_threads.threads_per_rank = 2;
  EXPECT_DOUBLE_EQ(cpu_compute_share(cpu, &two_threads, 2), 0.5);  // 2 / (2 x 2)
  EXPECT_DOUBLE_EQ(cpu_compute_share(cpu, nullptr, 8), 0.25);      // unrecorded: 1 thread
  ClusterSpec gpu = cpu;
  gpu.backend = Backend::kCuda;
  EXPECT_DOUBLE_EQ(cpu_compute_share(gpu, &one_thread, 8), 1.0);  // GPUs share nothing
}

// The busy-cores slowdown divides the share once two or more cores are busy, interpolated
// linearly from 1 (one core busy) to the recorded figure (busy_cores busy).
TEST(CpuShare, BusyCoresSlowEveryRankDown) {
  ClusterSpec cpu = local_cpu();
  Profile p;
  p.threads_per_rank = 1;
  p.busy_cores_slowdown = 1.5;
  p.busy_cores = 2;
  EXPECT_DOUBLE_EQ(cpu_compute_share(cpu, &p, 1), 1.0);          // one core busy: no slowdown
  EXPECT_DOUBLE_EQ(cpu_compute_share(cpu, &p, 2), 1.0 / 1.5);    // both busy
  EXPECT_DOUBLE_EQ(cpu_compute_share(cpu, &p, 4), 0.5 / 1.5);    // time-sliced and slowed
  cpu.host.cpu_cores = 8;
  p.busy_cores = 8;
  // 4 of 8 cores busy: 1 + 0.5 x (4 - 1) / (8 - 1).
  EXPECT_DOUBLE_EQ(cpu_compute_share(cpu, &p, 4), 1.0 / (1.0 + 0.5 * 3.0 / 7.0));
  p.busy_cores_slowdown = 0.0;  // not recorded
  EXPECT_DOUBLE_EQ(cpu_compute_share(cpu, &p, 4), 1.0);
  p.busy_cores_slowdown = 0.8;  // faster with every core busy (seen on a VM): 1 - 0.2 x 3 / 7
  EXPECT_DOUBLE_EQ(cpu_compute_share(cpu, &p, 4), 1.0 / (1.0 - 0.2 * 3.0 / 7.0));
}

TEST(CpuGemm, SamplesAreTakenAsMeasuredAndShared) {
  const ClusterSpec cpu = local_cpu();
  TrainSpec train;
  train.precision = Precision::kFp32;
  Profile p;
  p.threads_per_rank = 1;
  p.gemm.push_back({64, 192, 64, 20e9});
  const DeviceRates alone = device_rates(cpu, train, &p, 1);
  const GemmTime g = gemm_time(64, 192, 64, 1, alone);
  // 2 x 64 x 192 x 64 = 1572864 FLOPs at the sample's 20 GFLOP/s; no memory term.
  EXPECT_NEAR(g.compute_s, 1572864.0 / 20e9, 1e-15);
  EXPECT_EQ(g.memory_s, 0.0);
  // 8 ranks on 2 cores: a quarter of the rate each.
  const DeviceRates crowded = device_rates(cpu, train, &p, 8);
  EXPECT_NEAR(gemm_time(64, 192, 64, 1, crowded).time_s(), 4.0 * 1572864.0 / 20e9, 1e-15);
}

TEST(CpuAttention, MaterializedPathUsesTheMeasuredRate) {
  const ClusterSpec cpu = local_cpu();
  TrainSpec train;
  train.precision = Precision::kFp32;
  Profile p;
  p.threads_per_rank = 1;
  p.attention_flops_per_s = 5e9;
  p.attention_backward_flops_per_s = 10e9;
  p.elementwise_bytes_per_s = 2e9;
  p.gemm.push_back({64, 64, 64, 10e9});
  const DeviceRates rates = device_rates(cpu, train, &p, 1);
  const LayerForward f = layer_forward(bundled_model("tiny"), 1, 1, false, cpu_kernels(), rates);
  // Causal FLOPs 2 B NH T^2 HS = 2 x 1 x 4 x 64^2 x 16 = 524288 at 5 GFLOP/s, softmax inside.
  EXPECT_NEAR(f.attention_core_s(), 524288.0 / 5e9, 1e-15);
  EXPECT_EQ(f.softmax_s, 0.0);
  // Backward: twice the FLOPs (1048576) at the backward rate of 10 GFLOP/s.
  const LayerBackward b = layer_backward(bundled_model("tiny"), 1, 1, false, cpu_kernels(), rates);
  EXPECT_NEAR(b.attention_s, 1048576.0 / 10e9, 1e-15);
}

TEST(CpuBackward, TwiceTheForwardWithoutAProfileShapesWithOne) {
  const ClusterSpec cpu = local_cpu();
  TrainSpec train;
  train.precision = Precision::kFp32;
  const DeviceRates curve = device_rates(cpu, train, nullptr, 1);
  const LayerForward f = layer_forward(bundled_model("tiny"), 1, 1, false, cpu_kernels(), curve);
  const LayerBackward b = layer_backward(bundled_model("tiny"), 1, 1, false, cpu_kernels(), curve);
  EXPECT_NEAR(b.time_s(), 2.0 * f.time_s(), 1e-12 * f.time_s());
  // With samples: qkv's input gradient is (BT, C, OC) = (64, 64, 192) and its weight
  // gradient (OC, C, BT) = (192, 64, 64), each priced by its own sample.
  Profile p;
  p.threads_per_rank = 1;
  p.gemm = {{64, 64, 192, 40e9}, {192, 64, 64, 10e9}};
  const DeviceRates rates = device_rates(cpu, train, &p, 1);
  const LayerBackward s = layer_backward(bundled_model("tiny"), 1, 1, false, cpu_kernels(), rates);
  EXPECT_NEAR(s.input_grad[0].time_s(), 1572864.0 / 40e9, 1e-15);
  EXPECT_NEAR(s.weight_grad[0].time_s(), 1572864.0 / 10e9, 1e-15);
}

TEST(CpuElementwise, ByteCountsWorkedByHand) {
  // tiny, b = 1, t = 1, fp32: BT = 64, h = 64, f = 256, c = 4.
  // Forward: LayerNorms 64 x 4 h c = 65536, residuals 64 x 6 h c = 98304, GeLU
  // 64 x 2 c f = 131072, proj and fc2 bias adds 64 x 4 h c = 65536: 360448.
  EXPECT_DOUBLE_EQ(layer_elementwise_bytes(bundled_model("tiny"), 1, 1, false, cpu_kernels(), 4.0), 360448.0);
  // Backward: LayerNorms and copies 64 x 12 h c = 196608, GeLU 64 x 4 c f = 262144, bias
  // sums 64 x c x (3h + f + 2h) = 147456: 606208.
  EXPECT_DOUBLE_EQ(layer_backward_elementwise_bytes(bundled_model("tiny"), 1, 1, false, cpu_kernels(), 4.0),
                   606208.0);
}

TEST(CpuRecompute, FullRecomputationStopsBeforeFc2) {
  // The CPU executor's full recomputation reruns the layer up to the GeLU output
  // (gpt_layer.cc: layer_forward with y = nullptr): fc2, its bias pass and the residual add
  // are not priced. tiny, b = 1, t = 1, fp32: those two passes move 64 tokens x (3 h c +
  // 2 h c) = 64 x 1280 = 81920 bytes, at the elementwise rate of the curve.
  const ClusterSpec cpu = local_cpu();
  TrainSpec train;
  train.precision = Precision::kFp32;
  const DeviceRates rates = device_rates(cpu, train, nullptr, 1);
  LayerKernels kernels = cpu_kernels();
  const LayerForward whole = layer_forward(bundled_model("tiny"), 1, 1, false, kernels, rates);
  EXPECT_NEAR(whole.full_recompute_s(kernels), whole.time_s(), 1e-15);
  kernels.recompute_skips_output = true;
  const LayerForward f = layer_forward(bundled_model("tiny"), 1, 1, false, kernels, rates);
  EXPECT_NEAR(f.output_elementwise_s, memory_bound_time(81920.0, rates), 1e-15);
  EXPECT_NEAR(f.full_recompute_s(kernels),
              f.time_s() - f.fc2.time_s() - memory_bound_time(81920.0, rates), 1e-15);
  EXPECT_LT(f.full_recompute_s(kernels), 0.9 * f.time_s());  // fc2 is a quarter of the GEMM FLOPs

  // A plan's layer: its backward step recomputes so (op_costs.h).
  const ModelSpec model = bundled_model("tiny");
  const TrainSpec tiny_train =
      TrainSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/train/tiny.json");
  Plan plan = Plan::load(std::string(STRATA_SOURCE_DIR) + "/configs/plans/tiny-single.json");
  plan.recompute = Recompute::kFull;
  const TimeContext ctx = make_time_context(model, cpu, tiny_train, plan, nullptr, kernels);
  const LayerForward at_plan = layer_forward(model, plan.micro_batch, 1, false, kernels, ctx.rates);
  const Program program = make_program(model, tiny_train, plan);
  const RankProgram& rank = program.ranks[0];
  EXPECT_NEAR(TimeModelCosts(ctx).compute(rank, Part::kLayer, rank.unit_index("layer3"), false).recompute_s,
              at_plan.full_recompute_s(kernels), 1e-15);
}

TEST(CpuComm, EveryCollectiveIsExposedOncePerUnitAndStep) {
  // The CPU backend runs every op of a rank on one clock (SimulationMode::kSerial), so
  // nothing hides: tiny-dp2 at ZeRO 2 reduce-scatters each unit once a step (the last
  // micro-batch's backward, the embedding in the tail; not m = 4 times: its gradients stay
  // on the device), all-gathers it after its optimizer step, and all-reduces the norm, every
  // fp32 byte exposed: the embedding 20,480 parameters, 8 layers of 49,984, the final norm
  // 128, over the 2 ranks (one node: stride 1).
  const ModelSpec model = bundled_model("tiny");
  const ClusterSpec cpu = local_cpu();
  const TrainSpec train =
      TrainSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/train/tiny.json");
  Plan plan = Plan::load(std::string(STRATA_SOURCE_DIR) + "/configs/plans/tiny-dp2.json");
  plan.zero_stage = 2;
  ASSERT_EQ(simulation_mode(cpu.backend), SimulationMode::kSerial);
  const auto both = [&](double params) {
    return group_collective_time(cpu, nullptr, CollectiveOp::kReduceScatter, 4.0 * params, 2, 1, 2)
               .total_s() +
           group_collective_time(cpu, nullptr, CollectiveOp::kAllGather, 4.0 * params, 2, 1, 2)
               .total_s();
  };
  const double norm =
      group_collective_time(cpu, nullptr, CollectiveOp::kAllReduce, 4.0, 2, 1, 2).total_s();
  const Prediction p = predict(model, cpu, train, plan);
  EXPECT_NEAR(p.parts.dp_comm_s, both(20480) + 8 * both(49984) + both(128) + norm,
              1e-12 * p.parts.dp_comm_s);
  EXPECT_NEAR(p.parts.sum(), p.step_time_s, 1e-12 * p.step_time_s);
}

}  // namespace
}  // namespace strata
