// Each op of a Program priced alone (cost_model/pricing/op_costs.h) against values worked by hand:
// a layer's forward and backward with recomputation and TP collectives, the head and the
// embedding steps, ZeRO-3 gathers and reductions of one unit, SP norm sums, the tail's tied
// sum, norm and ZeRO-1 gathers, the optimizer steps; and the offload bytes of a step's ops
// summed: offload_traffic's, what the executor moves.
#include "cost_model/pricing/op_costs.h"

#include <gtest/gtest.h>

#include "cost_model/specs/units.h"
#include "tests/cost_model/time_test_cases.h"

namespace strata {
namespace {

using testing::test_cluster;
using testing::test_model;

// A100-like round numbers (time_model_test.cc's cluster): 4 nodes x 8 GPUs, 300 TFLOP/s
// bf16, 2000 GB/s HBM, NVLink 300 GB/s + 2 us, network 25 GB/s + 5 us, PCIe 25 GB/s.

// 8 layers, hidden 1024, 16 heads, sequence 1024, vocabulary 32,000: a layer is 12 h^2 + 13 h
// = 12,596,224 parameters at t = 1.

class OpCostsTest : public ::testing::Test {
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
  }
  TimeContext ctx() const {
    return make_time_context(model, cluster, train, plan, nullptr, LayerKernels{});
  }
  Program program() const { return make_program(model, train, plan); }
};

std::int32_t unit(const RankProgram& rank, const std::string& name) {
  const std::int32_t u = rank.unit_index(name);
  EXPECT_GE(u, 0) << name;
  return u;
}

TEST_F(OpCostsTest, ALayersForwardAndBackwardWithRecomputationAndTpCollectives) {
  plan.recompute = Recompute::kFull;
  const TimeContext c = ctx();
  const TimeModelCosts costs(c);
  const Program p = program();
  const RankProgram& last = p.ranks[1];
  const LayerForward L = layer_forward(model, 2, 4, false, LayerKernels{}, c.rates);
  // s b h = 1024 x 2 x 1024 bf16 = 4,194,304 bytes all-reduced over 4 ranks on NVLink:
  // x 2 (3/4) / 300e9 + 6 x 2 us (time_model_test's TP test).
  const double one = 4194304.0 * 1.5 / 300e9 + 6 * 2e-6;
  const StepTimeParts f = costs.compute(last, Part::kLayer, unit(last, "layer4"), true);
  EXPECT_DOUBLE_EQ(f.forward_s, L.time_s());
  EXPECT_NEAR(f.tp_comm_s, 2 * one, 1e-15);
  // Backward: twice the forward (no Profile), the forward again (full recomputation) and
  // its two all-reduces beside the backward's two.
  const StepTimeParts b = costs.compute(last, Part::kLayer, unit(last, "layer4"), false);
  EXPECT_DOUBLE_EQ(b.backward_s, 2 * L.time_s());
  EXPECT_DOUBLE_EQ(b.recompute_s, L.time_s());
  EXPECT_NEAR(b.tp_comm_s, 4 * one, 1e-15);
  EXPECT_DOUBLE_EQ(b.sum(), b.backward_s + b.recompute_s + b.tp_comm_s);
  // The head's forward step also runs the logits' backward (program.h): the head's forward,
  // twice it, and the all-reduce of its input gradient; its backward step costs nothing.
  const HeadForward head = head_forward(model, 2, 4, c.rates);
  const StepTimeParts h = costs.compute(last, Part::kHead, unit(last, "final_norm"), true);
  EXPECT_DOUBLE_EQ(h.forward_s, head.time_s());
  EXPECT_DOUBLE_EQ(h.backward_s, 2 * head.time_s());
  EXPECT_NEAR(h.tp_comm_s, one, 1e-15);
  EXPECT_EQ(costs.compute(last, Part::kHead, unit(last, "final_norm"), false).sum(), 0.0);
  // The embedding: its forward and its vocab-parallel output's all-reduce; 2x in backward.
  const RankProgram& first = p.ranks[0];
  const StepTimeParts e = costs.compute(first, Part::kEmbedding, unit(first, "embedding"), true);
  EXPECT_DOUBLE_EQ(e.forward_s, embedding_forward_s(model, 2, c.rates));
  EXPECT_NEAR(e.tp_comm_s, one, 1e-15);
  EXPECT_DOUBLE_EQ(costs.compute(first, Part::kEmbedding, unit(first, "embedding"), false).backward_s,
                   2 * e.forward_s);
  // Selective recomputation replays the attention core only, without TP collectives.
  plan.recompute = Recompute::kSelective;
  const TimeContext cs = ctx();
  const StepTimeParts sel = TimeModelCosts(cs).compute(last, Part::kLayer, unit(last, "layer4"), false);
  EXPECT_DOUBLE_EQ(sel.recompute_s, L.attention_core_s());
  EXPECT_NEAR(sel.tp_comm_s, 2 * one, 1e-15);
}

TEST_F(OpCostsTest, ZeroThreeGathersAndReducesOneUnitAtATime) {
  plan.tp = 1;
  plan.pp = 1;
  plan.dp = 32;  // stride 1, span 32 > 8 GPUs per node: the network, 25 GB/s + 5 us a step
  plan.zero_stage = 3;
  train.global_batch = 128;  // m = 2
  const TimeContext c = ctx();
  const TimeModelCosts costs(c);
  const Program p = program();
  const RankProgram& rank = p.ranks[0];
  // One layer: 12,596,224 params = 25,192,448 bf16 bytes; an all-gather over 32 ranks moves
  // 31/32 of it at 25 GB/s, plus 31 ring steps of 5 us. The reduce-scatter: the same of the
  // fp32 gradients the engine reduces, twice the bytes.
  const double layer_bytes = 2.0 * (12.0 * 1024 * 1024 + 13.0 * 1024);
  const double layer_s = layer_bytes * 31.0 / 32.0 / 25e9 + 31 * 5e-6;
  const double layer_grad_s = 2 * layer_bytes * 31.0 / 32.0 / 25e9 + 31 * 5e-6;
  EXPECT_NEAR(costs.state_move(rank, ProgramOpKind::kGather, unit(rank, "layer3")).dp_comm_s,
              layer_s, 1e-12);
  EXPECT_NEAR(costs.state_move(rank, ProgramOpKind::kReduceGrads, unit(rank, "layer3")).dp_comm_s,
              layer_grad_s, 1e-12);
  // The embedding is a unit of its own: V h + s h parameters.
  const double embedding_bytes = 2.0 * (32000.0 * 1024 + 1024.0 * 1024);
  EXPECT_NEAR(costs.state_move(rank, ProgramOpKind::kGather, unit(rank, "embedding")).dp_comm_s,
              embedding_bytes * 31.0 / 32.0 / 25e9 + 31 * 5e-6, 1e-12);
  EXPECT_EQ(costs.state_move(rank, ProgramOpKind::kRelease, unit(rank, "layer3")).sum(), 0.0);
  // ZeRO 0 and 1 all-reduce: twice the bus bytes, twice the ring steps.
  plan.zero_stage = 0;
  const TimeContext c0 = ctx();
  EXPECT_NEAR(TimeModelCosts(c0).state_move(rank, ProgramOpKind::kReduceGrads, unit(rank, "layer3")).dp_comm_s,
              2 * layer_grad_s, 1e-12);
  // Published conventions (Megatron-LM and DeepSpeed of 2021) reduce the gradients in the
  // parameters' bf16: the gather's bytes.
  TimeContext published = ctx();
  published.kernels.fp32_gradient_reductions = false;
  EXPECT_NEAR(TimeModelCosts(published).state_move(rank, ProgramOpKind::kReduceGrads, unit(rank, "layer3")).dp_comm_s,
              2 * layer_s, 1e-12);
}

TEST_F(OpCostsTest, SequenceParallelNormSumsAndTheTailsCollectives) {
  plan.sequence_parallel = true;
  plan.zero_stage = 1;
  const TimeContext c = ctx();
  const TimeModelCosts costs(c);
  const Program p = program();
  const RankProgram& last = p.ranks[1];
  // A layer's two LayerNorms, 4 h = 4096 fp32 gradients, all-reduced over the 4 TP ranks on
  // NVLink: 16384 x 1.5 / 300e9 + 6 x 2 us.
  EXPECT_NEAR(costs.state_move(last, ProgramOpKind::kSumNormGrads, unit(last, "layer4")).tp_comm_s,
              16384.0 * 1.5 / 300e9 + 6 * 2e-6, 1e-15);
  // Tail. The tied sum: the wte shard's gradient, ceil(V/t) h = 8000 x 1024 fp32, all-reduced
  // between the first and the last stage (2 ranks, t d (p - 1) = 16 apart: across nodes).
  ProgramOp tied;
  tied.kind = ProgramOpKind::kTiedEmbeddingSum;
  tied.unit = unit(last, "wte_copy");
  EXPECT_NEAR(costs.tail(last, tied).dp_comm_s, 32768000.0 * 1.0 / 25e9 + 2 * 5e-6, 1e-12);
  // The norm: one fp32 value over the 32 ranks of the world: 62 ring steps, a few bytes.
  ProgramOp norm;
  norm.kind = ProgramOpKind::kGradNorm;
  EXPECT_NEAR(costs.tail(last, norm).dp_comm_s, 62 * 5e-6 + 4.0 * 62.0 / 32.0 / 25e9, 1e-15);
  // ZeRO-1: the updated layer all-gathered over DP (4 ranks, stride 4: across nodes), after
  // its optimizer step on the device over its 1/d part (28 bytes a parameter in bf16).
  const double layer_params = (4.0 * 1024 * 1024 + 2.0 * 1024 * 4096 + 3.0 * 1024 + 4096) / 4 + 6 * 1024;
  ProgramOp gather;
  gather.kind = ProgramOpKind::kGatherParams;
  gather.unit = unit(last, "layer4");
  EXPECT_NEAR(costs.tail(last, gather).dp_comm_s, 2 * layer_params * 0.75 / 25e9 + 3 * 5e-6, 1e-12);
  ProgramOp step;
  step.kind = ProgramOpKind::kOptimizerStep;
  step.unit = unit(last, "layer4");
  EXPECT_NEAR(costs.tail(last, step).optimizer_s, layer_params / 4 * 28.0 / 1600e9, 1e-15);
  EXPECT_EQ(costs.tail(last, step).offload_s, 0.0);
}

TEST_F(OpCostsTest, ReplicatedKvHeadsGradientsAreSummedOverTheirCopies) {
  model.kv_heads = 2;  // t = 4 > 2: each KV head on 2 adjacent TP ranks
  const TimeContext c = ctx();
  const TimeModelCosts costs(c);
  const Program p = program();
  const RankProgram& last = p.ranks[1];
  // One head of K and V, 2 x 64 rows of h = 1024, and their biases, 2 x 64: 131,200 fp32
  // gradients (524,800 bytes) all-reduced over 2 ranks on NVLink: bus bytes x 2 (n-1)/n = 1,
  // 2 (n-1) = 2 steps of 2 us.
  EXPECT_NEAR(costs.state_move(last, ProgramOpKind::kSumKvGrads, unit(last, "layer4")).tp_comm_s,
              524800.0 / 300e9 + 2 * 2e-6, 1e-15);
}

TEST_F(OpCostsTest, HostOptimizerStepsPipelineTheirNvmeIo) {
  // ZeRO-Infinity's CPU AdamW on NVMe-resident state: the gradients down and the updated
  // parameters up over PCIe, then m, v and the master parameters read and written on NVMe
  // while the CPU steps: only the I/O's excess over the CPU step is exposed.
  plan.zero_stage = 1;
  plan.offload.optimizer = OffloadTier::kNvme;
  const TimeContext c = ctx();
  const TimeModelCosts costs(c);
  const Program p = program();
  const RankProgram& last = p.ranks[1];
  ProgramOp step;
  step.kind = ProgramOpKind::kOptimizerStep;
  step.unit = unit(last, "layer4");
  const std::int64_t n = last.units[static_cast<std::size_t>(step.unit)].params;
  const double part = static_cast<double>((n + 3) / 4);  // the 1/d shard, padded
  const double pcie = 2 * part * 2 / 25e9;               // bf16 gradients down, params up
  // 3 fp32 arrays each read and written; the node's NVMe shared by its 8 GPUs.
  const double nvme = 3 * part * 4 / (16e9 / 8) + 3 * part * 4 / (8e9 / 8);
  const double cpu = cpu_optimizer_s(c, static_cast<double>(n) / 4);
  const StepTimeParts t = costs.tail(last, step);
  EXPECT_DOUBLE_EQ(t.optimizer_s, cpu);
  EXPECT_NEAR(t.offload_s, pcie + std::max(nvme - cpu, 0.0), 1e-15);
  EXPECT_GT(nvme, cpu);
}

// Every fetch, gradient offload and optimizer step of a step, each counted as often as the
// Program runs it (a body op once per pass), moves offload_traffic's bytes exactly.
TEST_F(OpCostsTest, AStepsOpsMoveOffloadTrafficsBytes) {
  model.layers = 8;
  for (const OffloadPlan& off :
       {OffloadPlan{OffloadTier::kCpu, OffloadTier::kNone, OffloadTier::kNone},
        OffloadPlan{OffloadTier::kNvme, OffloadTier::kCpu, OffloadTier::kNone},
        OffloadPlan{OffloadTier::kNone, OffloadTier::kCpu, OffloadTier::kNone},
        OffloadPlan{OffloadTier::kCpu, OffloadTier::kCpu, OffloadTier::kCpu},
        OffloadPlan{OffloadTier::kNvme, OffloadTier::kNvme, OffloadTier::kNvme},
        OffloadPlan{OffloadTier::kNone, OffloadTier::kNvme, OffloadTier::kCpu}}) {
    for (bool sp : {false, true}) {
      for (std::int64_t pp : {1, 2}) {
        plan.pp = pp;
        plan.zero_stage = off.params != OffloadTier::kNone ? 3 : off.gradients != OffloadTier::kNone ? 2 : 1;
        plan.offload = off;
        plan.sequence_parallel = sp;
        plan.recompute = Recompute::kFull;
        SCOPED_TRACE(plan.label());
        const TimeContext c = ctx();
        const TimeModelCosts costs(c);
        const Program p = program();
        for (const RankProgram& rank : p.ranks) {
          TransferBytes sum;
          const auto add = [&](const TransferBytes& b) {
            sum.device_to_host += b.device_to_host;
            sum.host_to_device += b.host_to_device;
            sum.host_to_nvme += b.host_to_nvme;
            sum.nvme_to_host += b.nvme_to_host;
          };
          for (const ProgramOp& op : rank.ops) {
            if (op.is_pass()) {
              for (const ProgramOp& b : rank.bodies[static_cast<std::size_t>(op.body)].ops) {
                add(costs.offload_bytes(rank, b.kind, b.unit));
              }
            } else if (op.unit >= 0) {
              add(costs.offload_bytes(rank, op.kind, op.unit));
            }
          }
          EXPECT_EQ(sum, offload_traffic(model, plan, train, rank.pp_rank, c.rates.element_bytes)) << "rank " << rank.pp_rank;
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata
