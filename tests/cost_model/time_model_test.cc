// Unit tests of the time model's primitives against values worked by hand: collectives
// (alpha-beta with nccl-tests bus factors), link classes from Megatron's rank order, the
// GEMM curve and roofline, layer FLOPs, TP and PP terms, the optimizer, and predict()'s
// invariants (parts sum to the step, throughput formulas, the same replay as `simulate`).
// Each op's price is op_costs_test.cc's; the pipeline and overlap program_simulator_test.cc's.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cost_model/pricing/collectives.h"
#include "cost_model/pricing/compute_model.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/errors.h"
#include "cost_model/pricing/inter_node_share.h"
#include "cost_model/pricing/time_model.h"
#include "cost_model/specs/units.h"
#include "tests/cost_model/time_test_cases.h"

namespace strata {
namespace {

using testing::test_cluster;
using testing::test_model;

// A100-like cluster with round numbers so that expected values are easy to derive.

TEST(Collectives, BusFactorsAreNcclTests) {
  // nccl-tests PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather / reduce-scatter (n-1)/n.
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::kAllReduce, 8), 2.0 * 7.0 / 8.0);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::kAllGather, 4), 3.0 / 4.0);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::kReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::kP2p, 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::kAllReduce, 1), 0.0);
}

TEST(Collectives, AllReduceAlphaBeta) {
  // 1 GB over 8 ranks at 100 GB/s, alpha 1 us: bus bytes 1e9 * 14/8 = 1.75e9 -> 17.5 ms;
  // 2(n-1) = 14 ring steps -> 14 us.
  const CollectiveTime t =
      collective_time(CollectiveOp::kAllReduce, 1e9, 8, LinkRate{100e9, 1e-6});
  EXPECT_DOUBLE_EQ(t.bus_bytes, 1.75e9);
  EXPECT_NEAR(t.bandwidth_s, 17.5e-3, 1e-12);
  EXPECT_NEAR(t.latency_s, 14e-6, 1e-15);
  EXPECT_NEAR(t.total_s(), 17.514e-3, 1e-12);
}

TEST(Collectives, AllGatherP2pAndTrivialCases) {
  // All-gather of 400 MB over 4 ranks at 25 GB/s: 400e6 * 3/4 / 25e9 = 12 ms + 3 steps x 5 us.
  const CollectiveTime ag =
      collective_time(CollectiveOp::kAllGather, 400e6, 4, LinkRate{25e9, 5e-6});
  EXPECT_NEAR(ag.total_s(), 12e-3 + 15e-6, 1e-12);
  // p2p of 50 MB at 25 GB/s: 2 ms + one latency.
  const CollectiveTime p2p = collective_time(CollectiveOp::kP2p, 50e6, 2, LinkRate{25e9, 5e-6});
  EXPECT_NEAR(p2p.total_s(), 2e-3 + 5e-6, 1e-12);
  // One rank: nothing to exchange.
  EXPECT_EQ(collective_time(CollectiveOp::kAllReduce, 1e9, 1, LinkRate{1e9, 1e-6}).total_s(), 0.0);
  EXPECT_THROW(collective_time(CollectiveOp::kAllReduce, 1e9, 2, LinkRate{0, 0}), ConfigError);
}

TEST(Collectives, GroupLinkFollowsMegatronRankOrder) {
  const ClusterSpec c = test_cluster();  // 8 GPUs a node
  // TP group of 8 (stride 1) fills one node.
  EXPECT_EQ(group_link(c, 8, 1, 64), LinkClass::kIntraNode);
  // DP group with t = 4, d = 2: ranks 0 and 4 -> span 5 <= 8, inside a node (t*d <= 8).
  EXPECT_EQ(group_link(c, 2, 4, 64), LinkClass::kIntraNode);
  // DP group with t = 4, d = 4: t*d = 16 > 8 -> spans nodes.
  EXPECT_EQ(group_link(c, 4, 4, 64), LinkClass::kInterNode);
  // Pipeline neighbours t*d = 8 apart: always different nodes.
  EXPECT_EQ(group_link(c, 2, 8, 64), LinkClass::kInterNode);
  // A job on one node: every group inside it, whatever its shape.
  EXPECT_EQ(group_link(c, 3, 2, 6), LinkClass::kIntraNode);
}

// The groups' real nodes, rank by rank (ranks fill nodes of G in order), against group_link:
// every Megatron group kind (TP: t consecutive; DP: d ranks t apart inside a stage's t*d;
// the pipeline: p ranks t*d apart) over every shape of up to 4 nodes of 4 or 6 GPUs. The
// old rule (the group's span stride*(n-1)+1 <= G) called t = 3 on 4-GPU nodes intra-node,
// while ranks 3,4,5 straddle the first two nodes.
TEST(Collectives, GroupLinkMatchesTheNodesRanksFill) {
  for (const std::int64_t g : {4, 6}) {
    for (std::int64_t nodes = 1; nodes <= 4; ++nodes) {
      ClusterSpec c = test_cluster();
      c.gpus_per_node = g;
      const std::int64_t world = g * nodes;
      for (std::int64_t t = 1; t <= world; ++t) {
        for (std::int64_t d = 1; t * d <= world; ++d) {
          if (world % (t * d) != 0) continue;
          const std::int64_t p = world / (t * d);
          const auto crosses = [&](std::int64_t first, std::int64_t n, std::int64_t stride) {
            for (std::int64_t i = 1; i < n; ++i) {
              if ((first + i * stride) / g != first / g) return true;
            }
            return false;
          };
          bool tp = false, dp = false, pp = false;
          for (std::int64_t r = 0; r < world; ++r) {
            const std::int64_t tp_rank = r % t, dp_rank = (r / t) % d, pp_rank = r / (t * d);
            if (tp_rank == 0) tp = tp || crosses(r, t, 1);
            if (dp_rank == 0) dp = dp || crosses(r, d, t);
            if (pp_rank == 0) pp = pp || crosses(r, p, t * d);
          }
          SCOPED_TRACE(::testing::Message() << "G " << g << " nodes " << nodes << " t " << t
                                          << " d " << d << " p " << p);
          const auto link = [](bool cross) { return cross ? LinkClass::kInterNode : LinkClass::kIntraNode; };
          EXPECT_EQ(group_link(c, t, 1, world), link(tp));
          EXPECT_EQ(group_link(c, d, t, world), link(dp));
          EXPECT_EQ(group_link(c, p, t * d, world), link(pp));
        }
      }
    }
  }
}

TEST(Collectives, ProfileFitReplacesClusterRates) {
  const ClusterSpec c = test_cluster();
  Profile profile;
  profile.collectives.push_back({"all_reduce", "intra_node", 8, 14e-6, 200e9});
  const LinkRate rate = link_rate(c, LinkClass::kIntraNode, CollectiveOp::kAllReduce, 8, &profile);
  EXPECT_DOUBLE_EQ(rate.bandwidth_bytes_per_s, 200e9);
  EXPECT_DOUBLE_EQ(rate.latency_s, 1e-6);  // 14 us over 2(8-1) = 14 steps
  // No fit for all-gather: the cluster's figures.
  const LinkRate ag = link_rate(c, LinkClass::kIntraNode, CollectiveOp::kAllGather, 8, &profile);
  EXPECT_DOUBLE_EQ(ag.bandwidth_bytes_per_s, 300e9);
}

TEST(Compute, GemmCurveSaturatesBelowPeak) {
  // x/(x+96) per dimension: 96^3 -> 0.5^3 of the peak efficiency.
  EXPECT_NEAR(gemm_efficiency_curve(96, 96, 96), kGemmPeakEfficiency * 0.125, 1e-12);
  const double big = gemm_efficiency_curve(16384, 16384, 16384);
  EXPECT_LT(big, kGemmPeakEfficiency);
  EXPECT_GT(big, 0.98 * kGemmPeakEfficiency);
  EXPECT_LT(gemm_efficiency_curve(2048, 2048, 64), gemm_efficiency_curve(2048, 2048, 128));
}

TEST(Compute, GemmRooflineAndProfileSamples) {
  DeviceRates rates{300e12, 1600e9, 2, nullptr};
  // 4096^3: 2 * 4096^3 = 1.374e11 FLOPs at 300e12 * eff.
  const GemmTime big = gemm_time(4096, 4096, 4096, 1, rates);
  EXPECT_DOUBLE_EQ(big.flops, 2.0 * 4096.0 * 4096.0 * 4096.0);
  EXPECT_NEAR(big.compute_s, big.flops / (300e12 * gemm_efficiency_curve(4096, 4096, 4096)), 1e-15);
  EXPECT_GT(big.compute_s, big.memory_s);  // compute bound
  // A matrix-vector-like GEMM is memory bound: bytes (m k + k n + m n) * 2 / 1600 GB/s.
  const GemmTime thin = gemm_time(8192, 8192, 1, 1, rates);
  EXPECT_DOUBLE_EQ(thin.bytes, (8192.0 + 8192.0 + 8192.0 * 8192.0) * 2.0);
  EXPECT_DOUBLE_EQ(thin.time_s(), thin.memory_s);
  // A profile sample at the exact shape is used as is: 150 TFLOP/s of 300 -> 0.5.
  Profile profile;
  profile.gemm.push_back({4096, 4096, 4096, 150e12});
  profile.gemm.push_back({512, 512, 512, 30e12});
  rates.profile = &profile;
  EXPECT_DOUBLE_EQ(gemm_efficiency(4096, 4096, 4096, rates), 0.5);
  const double between = gemm_efficiency(1448, 1448, 1448, rates);  // log-midpoint
  EXPECT_GT(between, 0.1);
  EXPECT_LT(between, 0.5);
}

// gemm_efficiency as it was before device_rates made the samples' log2 shapes once
// (GemmSamplePoints): the log2 of every sample taken on each call. The reference the
// precomputed points must match to the bit (the planner's outputs are byte-identical).
double efficiency_with_logs_per_call(double m, double n, double k, const DeviceRates& rates) {
  std::array<double, 4> best_dist;
  std::array<double, 4> best_eff{};
  best_dist.fill(std::numeric_limits<double>::infinity());
  const double lm = std::log2(m), ln = std::log2(n), lk = std::log2(k);
  for (const GemmSample& s : rates.profile->gemm) {
    if (s.m <= 0 || s.n <= 0 || s.k <= 0 || !(s.flops_per_s > 0)) continue;
    const double dm = std::log2(static_cast<double>(s.m)) - lm;
    const double dn = std::log2(static_cast<double>(s.n)) - ln;
    const double dk = std::log2(static_cast<double>(s.k)) - lk;
    const double d = std::sqrt(dm * dm + dn * dn + dk * dk);
    const double eff = s.flops_per_s / rates.peak_flops;
    for (int i = 0; i < 4; ++i) {
      if (d < best_dist[i]) {
        for (int j = 3; j > i; --j) {
          best_dist[j] = best_dist[j - 1];
          best_eff[j] = best_eff[j - 1];
        }
        best_dist[i] = d;
        best_eff[i] = eff;
        break;
      }
    }
  }
  if (!std::isfinite(best_dist[0])) return gemm_efficiency_curve(m, n, k);
  if (best_dist[0] < 1e-9) return best_eff[0];
  double weight_sum = 0, eff_sum = 0;
  for (int i = 0; i < 4 && std::isfinite(best_dist[i]); ++i) {
    const double w = 1.0 / (best_dist[i] * best_dist[i]);
    weight_sum += w;
    eff_sum += w * best_eff[i];
  }
  return eff_sum / weight_sum;
}

TEST(Compute, GemmSamplePointsGiveTheSameEfficienciesToTheBit) {
  // The bundled H200 calibration (72 samples) with an unusable sample added (skipped by both),
  // on shapes at, between and beyond its samples, with the cluster's bf16 peak.
  Profile profile =
      Profile::load(std::string(STRATA_SOURCE_DIR) + "/configs/profiles/h200-calibrated-2026-11-26.json");
  ASSERT_GE(profile.gemm.size(), 8u);
  profile.gemm.push_back({0, 512, 512, 1e12});
  const DeviceRates rates = device_rates(test_cluster(), TrainSpec{}, &profile);
  ASSERT_NE(rates.gemm_points, nullptr);
  EXPECT_EQ(rates.gemm_points->points.size(), profile.gemm.size() - 1);
  DeviceRates without_points = rates;
  without_points.gemm_points.reset();
  // Points of another profile are not this one's: made again from rates.profile.
  Profile other;
  other.gemm.push_back({64, 64, 64, 1e12});
  DeviceRates stale = rates;
  stale.gemm_points = std::make_shared<const GemmSamplePoints>(gemm_sample_points(other));
  std::vector<double> dims = {1, 3, 96, 100, 1000, 1448, 8192, 65536, 1e6};
  for (const GemmSample& s : profile.gemm) dims.push_back(static_cast<double>(s.m));
  int compared = 0;
  for (std::size_t i = 0; i < dims.size(); i += 2) {
    for (std::size_t j = 0; j < dims.size(); j += 3) {
      for (double k : {64.0, 1024.0, 5120.0, 12288.0}) {
        const double m = dims[i], n = dims[j];
        const double expected = efficiency_with_logs_per_call(m, n, k, rates);
        EXPECT_EQ(gemm_efficiency(m, n, k, rates), expected) << m << " " << n << " " << k;
        EXPECT_EQ(gemm_efficiency(m, n, k, without_points), expected);
        EXPECT_EQ(gemm_efficiency(m, n, k, stale), expected);
        ++compared;
      }
    }
  }
  // An exact sample shape returns its sample (the < 1e-9 branch is reached).
  const GemmSample& first = profile.gemm.front();
  EXPECT_EQ(gemm_efficiency(static_cast<double>(first.m), static_cast<double>(first.n),
                            static_cast<double>(first.k), rates),
            first.flops_per_s / rates.peak_flops);
  EXPECT_GT(compared, 100);
}

TEST(Compute, FlashBackwardUsesTheMeasuredBackwardRate) {
  DeviceRates rates{300e12, 1600e9, 2, nullptr};
  Profile p;
  p.attention_flops_per_s = 100e12;
  rates.profile = &p;
  const LayerKernels flash;  // strata's CUDA kernels
  ASSERT_EQ(flash.attention, AttentionKernel::kFlash);
  const ModelSpec m = test_model();  // b 1, s 1024, a 16, d 64
  // Without a measured backward: twice the forward's attention.
  const LayerForward fwd = layer_forward(m, 1, 1, false, flash, rates);
  EXPECT_DOUBLE_EQ(layer_backward(m, 1, 1, false, flash, rates).attention_s,
                   2.0 * fwd.attention_core_s());
  // With one: the full 4 b a s^2 d = 4 x 16 x 1024^2 x 64 = 4294967296 FLOPs (twice the
  // causal forward's) at 50 TFLOP/s = 85.9 us, where twice the forward would say 42.9 us.
  p.attention_backward_flops_per_s = 50e12;
  EXPECT_NEAR(layer_backward(m, 1, 1, false, flash, rates).attention_s, 4294967296.0 / 50e12,
              1e-15);
}

// MFU's peak: the cluster's in the train precision (300 TFLOP/s bf16, 20 fp32 here), or the
// best GEMM a profile measured when that is higher (the hardware reached it), never lower.
TEST(Compute, MfuPeakIsTheClusterPeakOrAHigherMeasuredGemm) {
  const ClusterSpec c = test_cluster();
  TrainSpec bf16, fp32;
  bf16.precision = Precision::kBf16;
  fp32.precision = Precision::kFp32;
  EXPECT_EQ(mfu_peak_flops(c, bf16, nullptr), 300e12);
  EXPECT_EQ(mfu_peak_flops(c, fp32, nullptr), 20e12);
  Profile measured;
  measured.gemm = {{1024, 1024, 1024, 25e12}, {4096, 4096, 4096, 31e12}, {64, 64, 64, 2e12}};
  EXPECT_EQ(mfu_peak_flops(c, fp32, &measured), 31e12);   // above the nominal 20
  EXPECT_EQ(mfu_peak_flops(c, bf16, &measured), 300e12);  // below the nominal 300
}

// On the CPU backend the device is one core: a rank's peak is one core's times the cores its
// threads keep busy, min(threads, cores / ranks per node); a profile's GEMMs, timed on its
// threads_per_rank threads, count per core. 2 cores, 0.2 TFLOP/s a core:
//   1 rank x 2 threads -> 2 cores: 0.4; 1 x 1 -> 0.2; 2 ranks x 2 threads -> 1 core each:
//   0.2; 8 ranks -> a quarter core each: 0.05.
//   A profile timed at 2 threads with a best GEMM of 0.5 TFLOP/s is 0.25 a core, above the
//   nominal 0.2: 1 rank x 2 threads -> 0.5.
// On GPUs the cores are 1 whatever the threads.
TEST(Compute, MfuPeakCountsTheCoresACpuRankRunsOn) {
  ClusterSpec cpu = test_cluster();
  cpu.backend = Backend::kCpu;
  cpu.host.cpu_cores = 2;
  cpu.device.fp32_flops = 0.2e12;
  TrainSpec fp32;
  fp32.precision = Precision::kFp32;
  EXPECT_DOUBLE_EQ(mfu_cores_per_rank(cpu, 1, 2), 2.0);
  EXPECT_DOUBLE_EQ(mfu_cores_per_rank(cpu, 1, 1), 1.0);
  EXPECT_DOUBLE_EQ(mfu_cores_per_rank(cpu, 2, 2), 1.0);
  EXPECT_DOUBLE_EQ(mfu_cores_per_rank(cpu, 8, 1), 0.25);
  EXPECT_DOUBLE_EQ(mfu_peak_flops(cpu, fp32, nullptr, mfu_cores_per_rank(cpu, 1, 2)), 0.4e12);
  EXPECT_DOUBLE_EQ(mfu_peak_flops(cpu, fp32, nullptr, mfu_cores_per_rank(cpu, 8, 1)), 0.05e12);
  Profile two_threads;
  two_threads.threads_per_rank = 2;
  two_threads.gemm = {{2048, 768, 256, 0.5e12}};
  EXPECT_DOUBLE_EQ(mfu_peak_flops(cpu, fp32, &two_threads, 2.0), 0.5e12);
  const ClusterSpec gpu = test_cluster();
  EXPECT_DOUBLE_EQ(mfu_cores_per_rank(gpu, 8, 16), 1.0);
}

TEST(Compute, LayerForwardFlopsMatchMegatronCount) {
  const ModelSpec m = test_model();
  const DeviceRates rates{300e12, 1600e9, 2, nullptr};
  // Forward FLOPs of one layer, b sequences: 24 b s h^2 + 4 b s^2 h (f = 4h), / t.
  for (std::int64_t t : {1, 2, 4}) {
    const LayerForward L = layer_forward(m, 2, t, false, LayerKernels{}, rates);
    const double b = 2, s = 1024, h = 1024;
    EXPECT_NEAR(L.flops(), (24 * b * s * h * h + 4 * b * s * s * h) / t, 1.0) << "t=" << t;
  }
  // Materialized attention with dropout moves a/t s^2 b (4c + 1) bytes in softmax + dropout.
  const LayerForward mat = layer_forward(
      m, 1, 1, false, LayerKernels{AttentionKernel::kMaterialized, true}, rates);
  EXPECT_DOUBLE_EQ(mat.softmax_bytes, 16.0 * 1024.0 * 1024.0 * 9.0);
  const LayerForward flash = layer_forward(m, 1, 1, false, LayerKernels{}, rates);
  EXPECT_EQ(flash.softmax_bytes, 0.0);
  EXPECT_LT(flash.time_s(), mat.time_s());
}

class TimeModelTest : public ::testing::Test {
 protected:
  ModelSpec model = test_model();
  ClusterSpec cluster = test_cluster();
  TrainSpec train;
  Plan plan;
  void SetUp() override {
    train.global_batch = 64;
    plan.tp = 4;
    plan.pp = 2;
    plan.dp = 4;
    plan.micro_batch = 2;
    plan.schedule = ScheduleKind::kOneFOneB;
  }
  TimeContext ctx() const {
    return make_time_context(model, cluster, train, plan, nullptr, LayerKernels{});
  }
};

TEST_F(TimeModelTest, TensorParallelCommIsTwoAllReducesPerDirection) {
  plan.recompute = Recompute::kFull;
  const TpLayerComm tp = tp_layer_comm(ctx());
  // s b h = 1024 * 2 * 1024 elements x 2 bytes = 4,194,304 bytes; all-reduce over 4 ranks
  // on NVLink: bus bytes x 2*3/4 = 6,291,456 / 300e9 = 20.97 us + 6 steps x 2 us.
  const double one = 4194304.0 * 1.5 / 300e9 + 6 * 2e-6;
  EXPECT_NEAR(tp.forward_s, 2 * one, 1e-12);
  EXPECT_NEAR(tp.backward_s, 2 * one, 1e-12);
  EXPECT_NEAR(tp.recompute_s, 2 * one, 1e-12);
  plan.recompute = Recompute::kSelective;
  EXPECT_EQ(tp_layer_comm(ctx()).recompute_s, 0.0);
  // A recomputation that stops before fc2 replays only the attention's all-reduce.
  plan.recompute = Recompute::kFull;
  LayerKernels stops_at_gelu;
  stops_at_gelu.recompute_skips_output = true;
  EXPECT_NEAR(tp_layer_comm(make_time_context(model, cluster, train, plan, nullptr, stops_at_gelu))
                  .recompute_s,
              one, 1e-12);
}

TEST_F(TimeModelTest, PipelineTransferUsesScatterGatherAcrossNodes) {
  // t*d*p = 32 > 8 GPUs per node: inter-node, s b h / t = 4,194,304 / 4 bytes at 25 GB/s
  // + 5 us, plus the receiver's NVLink all-gather of the full message over 4 ranks.
  const P2pTransfer p2p = p2p_transfer(ctx());
  EXPECT_EQ(p2p.link, LinkClass::kInterNode);
  EXPECT_DOUBLE_EQ(p2p.bytes, 4194304.0 / 4.0);
  EXPECT_NEAR(p2p.transfer_s, 1048576.0 / 25e9 + 5e-6, 1e-12);
  EXPECT_NEAR(p2p.gather_s, 4194304.0 * 0.75 / 300e9 + 3 * 2e-6, 1e-12);
}

TEST_F(TimeModelTest, CpuOptimizerIsMemoryBoundShareOfTheHost) {
  plan.zero_stage = 2;
  plan.offload.optimizer = OffloadTier::kCpu;
  const TimeContext c = ctx();
  // 8 GPUs share 200 GB/s: 25 GB/s each; 30 bytes/param -> 1e9 params = 1.2 s;
  // compute 12 FLOP/param over 250 GFLOP/s = 0.048 s: memory bound.
  EXPECT_NEAR(cpu_optimizer_s(c, 1e9), 1.2, 1e-12);
  // Device AdamW: 28 bytes/param (bf16) over 0.8 x 2000 GB/s.
  EXPECT_NEAR(device_optimizer_s(c, 1e8), 1e8 * 28.0 / 1600e9, 1e-12);
}

TEST_F(TimeModelTest, PredictPartsSumToStepAndThroughputFollowsFormulas) {
  plan.recompute = Recompute::kFull;
  const Prediction p = predict(model, cluster, train, plan);
  EXPECT_EQ(p.kind, "prediction");
  EXPECT_NEAR(p.parts.sum(), p.step_time_s, 1e-9 * p.step_time_s);
  EXPECT_NEAR(p.tokens_per_s, 64.0 * 1024.0 / p.step_time_s, 1e-6);
  EXPECT_NEAR(p.tflops_per_gpu,
              megatron_model_flops(model, 64) / p.step_time_s / 32.0 / units::kTera, 1e-9);
  // MFU counts no recomputed forward: three passes instead of four for the layers, the same
  // three for the logits, against the 300 TFLOP/s peak of this test's device.
  EXPECT_NEAR(p.mfu,
              model_flops_without_recompute(model, 64) / p.step_time_s / 32.0 / 300e12, 1e-12);
  EXPECT_LT(p.mfu, p.tflops_per_gpu * units::kTera / 300e12);
  // m = 64 / (4 * 2) = 8 micro-batches, p = 2. The bubble is the critical rank's idle time:
  // at least (p - 1)/m of its compute (exactly that for uniform stages and free transfers,
  // program_simulator_test), more here: rank 1 also runs the head, so rank 0 waits longer.
  const StageOpTimes times = stage_op_times(model, cluster, train, plan);
  const StepSimulation& s = times.timeline.step;
  const double busy = s.busy_s[static_cast<std::size_t>(s.critical_rank)];
  EXPECT_GE(p.parts.bubble_s, busy / 8.0);
  EXPECT_NEAR(p.bubble_fraction, p.parts.bubble_s / p.step_time_s, 1e-15);
  EXPECT_EQ(p.per_rank.size(), 2u);
  EXPECT_GT(p.memory_bytes.device, 0.0);
}

// inter_node_share.h on the 8-GPU nodes of test_cluster(), parts 1 s tp, 2 s dp, 4 s pp.
TEST(InterNodeShare, TheGroupsThatSpanNodesByTheTimeModelsRule) {
  const ClusterSpec c = test_cluster();
  StepTimeParts parts;
  parts.tp_comm_s = 1, parts.dp_comm_s = 2, parts.pp_comm_s = 4;
  Plan plan;
  // t2 d2: 4 ranks in one node, no inter-node link.
  plan.tp = 2, plan.dp = 2, plan.pp = 1;
  EXPECT_FALSE(inter_node_comm_s(parts, plan, c).has_value());
  // t8 d4: TP fills a node (span 8), DP spans 8 x 3 + 1 = 25 ranks: dp only.
  plan.tp = 8, plan.dp = 4;
  EXPECT_EQ(inter_node_comm_s(parts, plan, c), 2.0);
  // t4 d1 p4: 16 ranks, TP inside a node, no DP group, the pipeline across nodes: pp only.
  plan.tp = 4, plan.dp = 1, plan.pp = 4;
  EXPECT_EQ(inter_node_comm_s(parts, plan, c), 4.0);
  // t1 d16: DP spans 16 ranks (inter), p = 1 so its pp part (none) is not counted.
  plan.tp = 1, plan.dp = 16, plan.pp = 1;
  EXPECT_EQ(inter_node_comm_s(parts, plan, c), 2.0);
}

TEST_F(TimeModelTest, PredictionCarriesTheInterNodeShareOfItsOwnParts) {
  // t4 p2 d4 on 8-GPU nodes: 32 ranks; DP spans 4 x 3 + 1 = 13 ranks and the pipeline
  // crosses nodes, so dp + pp comm go to the inter-node link, TP (4 ranks) does not.
  const Prediction p = predict(model, cluster, train, plan);
  ASSERT_TRUE(p.inter_node_comm_s.has_value());
  EXPECT_DOUBLE_EQ(*p.inter_node_comm_s, p.parts.dp_comm_s + p.parts.pp_comm_s);
  // One node holds them all: none.
  cluster.gpus_per_node = 32;
  EXPECT_FALSE(predict(model, cluster, train, plan).inter_node_comm_s.has_value());
}

TEST_F(TimeModelTest, StageOpTimesReplayTheProgramPredictPrices) {
  // `strata simulate` and predict() are the same replay: the same step, the same parts, and
  // a start and an end for every op of the Program (each pass's body ops after it).
  plan.schedule = ScheduleKind::kInterleaved;
  plan.virtual_stages = 2;
  plan.zero_stage = 3;
  plan.recompute = Recompute::kFull;
  const StageOpTimes times = stage_op_times(model, cluster, train, plan);
  const Prediction p = predict(model, cluster, train, plan);
  EXPECT_EQ(times.program.micro_batches, 8);
  EXPECT_EQ(times.mode, SimulationMode::kStreams);
  EXPECT_EQ(times.timeline.step.step_s, p.step_time_s);
  EXPECT_EQ(times.timeline.step.parts.bubble_s, p.parts.bubble_s);
  EXPECT_EQ(times.timeline.step.parts.dp_comm_s, p.parts.dp_comm_s);
  for (std::size_t r = 0; r < times.program.ranks.size(); ++r) {
    const RankProgram& rank = times.program.ranks[r];
    std::size_t ops = rank.ops.size();
    for (const ProgramOp& op : rank.ops) {
      if (op.is_pass()) ops += rank.bodies[static_cast<std::size_t>(op.body)].ops.size();
    }
    EXPECT_EQ(times.timeline.ranks[r].size(), ops);
    for (const TimedOp& t : times.timeline.ranks[r]) {
      EXPECT_LE(t.start_s, t.end_s);
      EXPECT_LE(t.end_s, p.step_time_s);
    }
  }
}

TEST_F(TimeModelTest, ZeroThreeTradesMemoryForCommunication) {
  plan.tp = 1;
  plan.pp = 1;
  plan.dp = 32;
  plan.micro_batch = 2;
  train.global_batch = 256;  // m = 256 / (32 * 2) = 4 micro-batches
  plan.zero_stage = 1;
  const Prediction z1 = predict(model, cluster, train, plan);
  plan.zero_stage = 3;
  const Prediction z3 = predict(model, cluster, train, plan);
  EXPECT_LT(z3.memory_bytes.device, z1.memory_bytes.device);
  // ZeRO-3 gathers hide behind compute while the link is fast; on a 100x slower network
  // its 1.5x volume, paid every micro-batch, is exposed and costs more than ZeRO-1's
  // once-per-step reduction + gather.
  cluster.inter_node.bandwidth_bytes_per_s /= 100.0;
  plan.zero_stage = 1;
  const Prediction z1_slow = predict(model, cluster, train, plan);
  plan.zero_stage = 3;
  const Prediction z3_slow = predict(model, cluster, train, plan);
  EXPECT_GT(z3_slow.parts.dp_comm_s - z3.parts.dp_comm_s,
            z1_slow.parts.dp_comm_s - z1.parts.dp_comm_s);
  EXPECT_NEAR(z3_slow.parts.sum(), z3_slow.step_time_s, 1e-9 * z3_slow.step_time_s);
}

TEST_F(TimeModelTest, InfeasiblePlanThrows) {
  plan.tp = 3;  // 16 heads % 3 != 0
  EXPECT_THROW(predict(model, cluster, train, plan), InfeasiblePlan);
}

}  // namespace
}  // namespace strata
