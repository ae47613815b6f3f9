// TimeModelCosts: each op of a Program priced alone from the time model's primitives (the
// table in op_costs.h). No overlap is decided here.
#include "cost_model/pricing/op_costs.h"

#include <stdexcept>

#include <fmt/format.h>

namespace strata {
namespace {

using Kind = ProgramOpKind;

const ProgramUnit& unit_of(const RankProgram& rank, std::int32_t unit) {
  if (unit < 0 || static_cast<std::size_t>(unit) >= rank.units.size()) {
    throw std::logic_error(fmt::format("op costs: unit {} of pipeline rank {} (which has {})", unit,
                                       rank.pp_rank, rank.units.size()));
  }
  return rank.units[static_cast<std::size_t>(unit)];
}

}  // namespace

TimeModelCosts::TimeModelCosts(const TimeContext& ctx) : ctx_(ctx) {
  const ModelSpec& model = *ctx.model;
  const Plan& plan = *ctx.plan;
  const LayerForward layer = layer_forward(model, plan.micro_batch, plan.tp,
                                           plan.sequence_parallel, ctx.kernels, ctx.rates);
  const double overhead = ctx.profile != nullptr ? ctx.profile->op_overhead_s : 0.0;
  layer_forward_s_ = layer.time_s() + kLayerForwardOps * overhead;
  embedding_forward_s_ = embedding_forward_s(model, plan.micro_batch, ctx.rates);
  head_forward_s_ = head_forward(model, plan.micro_batch, plan.tp, ctx.rates).time_s();
  if (ctx.profile == nullptr) {
    // Each GEMM becomes two of the same FLOPs (input and weight gradients); the memory-bound
    // kernels read the saved input and the gradient and write one.
    layer_backward_s_ = 2.0 * layer_forward_s_;
    head_backward_s_ = 2.0 * head_forward_s_;
  } else {
    layer_backward_s_ = layer_backward(model, plan.micro_batch, plan.tp, plan.sequence_parallel,
                                       ctx.kernels, ctx.rates)
                            .time_s() +
                        kLayerBackwardOps * overhead;
    head_backward_s_ = head_backward_s(model, plan.micro_batch, plan.tp, ctx.rates);
  }
  switch (plan.recompute) {
    case Recompute::kNone: break;
    case Recompute::kSelective: layer_recompute_s_ = layer.attention_core_s(); break;
    case Recompute::kFull: {
      const double ops = ctx.kernels.recompute_skips_output ? kLayerForwardOps - kLayerOutputOps
                                                            : kLayerForwardOps;
      layer_recompute_s_ = layer.full_recompute_s(ctx.kernels) + ops * overhead;
      break;
    }
  }
  tp_ = tp_layer_comm(ctx);
  tp_one_s_ = tp_.forward_s / 2.0;
  p2p_s_ = p2p_transfer(ctx).total_s();
}

double TimeModelCosts::dp_collective_s(CollectiveOp op, double bytes) const {
  const Plan& plan = *ctx_.plan;
  return group_collective_time(*ctx_.cluster, ctx_.profile, op, bytes, plan.dp, plan.tp, plan.world_size()).total_s();
}

StepTimeParts TimeModelCosts::compute(const RankProgram&, Part part, std::int32_t,
                                      bool forward) const {
  StepTimeParts t;
  const bool tp = ctx_.plan->tp > 1;
  switch (part) {
    case Part::kLayer:
      if (forward) {
        t.forward_s = layer_forward_s_;
        t.tp_comm_s = tp_.forward_s;
      } else {
        t.backward_s = layer_backward_s_;
        t.recompute_s = layer_recompute_s_;
        t.tp_comm_s = tp_.backward_s + tp_.recompute_s;
      }
      break;
    case Part::kEmbedding:
      if (forward) {
        t.forward_s = embedding_forward_s_;
        t.tp_comm_s = tp ? tp_one_s_ : 0.0;
      } else {
        t.backward_s = 2.0 * embedding_forward_s_;
      }
      break;
    case Part::kHead:
      if (forward) {
        t.forward_s = head_forward_s_;
        t.backward_s = head_backward_s_;
        t.tp_comm_s = tp ? tp_one_s_ : 0.0;
      }
      break;
    case Part::kNone:
      throw std::logic_error("op costs: a compute step without a part");
  }
  return t;
}

TransferBytes TimeModelCosts::offload_bytes(const RankProgram& rank, ProgramOpKind kind,
                                            std::int32_t unit) const {
  if (kind != Kind::kFetch && kind != Kind::kOffloadGrads && kind != Kind::kOptimizerStep) {
    return {};
  }
  const UnitOffloadBytes b =
      unit_offload_bytes(*ctx_.plan, unit_of(rank, unit).params, ctx_.rates.element_bytes);
  if (kind == Kind::kFetch) return b.fetch;
  if (kind == Kind::kOffloadGrads) return b.grads_down;
  return b.optimizer;
}

double TimeModelCosts::gradient_bytes() const {
  return ctx_.kernels.fp32_gradient_reductions ? static_cast<double>(dtype_bytes(kGradientDType))
                                               : ctx_.rates.element_bytes;
}

StepTimeParts TimeModelCosts::state_move(const RankProgram& rank, ProgramOpKind kind,
                                         std::int32_t unit) const {
  StepTimeParts t;
  const double g = gradient_bytes();
  const ProgramUnit& u = unit_of(rank, unit);
  const double params = static_cast<double>(u.params);
  switch (kind) {
    case Kind::kGather:
      t.dp_comm_s = dp_collective_s(CollectiveOp::kAllGather, params * ctx_.rates.element_bytes);
      break;
    case Kind::kReduceGrads:
      t.dp_comm_s = dp_collective_s(ctx_.plan->zero_stage >= 2 ? CollectiveOp::kReduceScatter
                                                               : CollectiveOp::kAllReduce,
                                    params * g);
      break;
    case Kind::kSumNormGrads: {
      // The norms' gains (and LayerNorm biases): two norms in a layer, one in the final norm.
      const double elements = static_cast<double>(
          u.kind == UnitKind::kLayer ? layer_norm_params(*ctx_.model) : final_norm_params(*ctx_.model));
      t.tp_comm_s = group_collective_time(*ctx_.cluster, ctx_.profile, CollectiveOp::kAllReduce,
                                          elements * g, ctx_.plan->tp, 1, ctx_.plan->world_size())
                        .total_s();
      break;
    }
    case Kind::kSumKvGrads: {
      // The layer's K|V weight (and bias) over the t / kv_heads consecutive TP ranks holding
      // the same KV head.
      const double elements =
          static_cast<double>(replicated_kv_params_per_tp_rank(*ctx_.model, ctx_.plan->tp));
      t.tp_comm_s = group_collective_time(*ctx_.cluster, ctx_.profile, CollectiveOp::kAllReduce,
                                          elements * g,
                                          kv_head_copies(*ctx_.model, ctx_.plan->tp), 1,
                                          ctx_.plan->world_size())
                        .total_s();
      break;
    }
    case Kind::kFetch:
    case Kind::kOffloadGrads:
      t.offload_s = offload_link_time(ctx_, offload_bytes(rank, kind, unit));
      break;
    case Kind::kRelease: break;
    case Kind::kOptimizerStep: return optimizer_step(u);  // a layer's host step in its backward
    default:
      throw std::logic_error(fmt::format("op costs: {} is not a state move", to_string(kind)));
  }
  return t;
}

StepTimeParts TimeModelCosts::transfer(const RankProgram&, ProgramOpKind, std::int32_t) const {
  StepTimeParts t;
  t.pp_comm_s = p2p_s_;
  return t;
}

StepTimeParts TimeModelCosts::optimizer_step(const ProgramUnit& unit) const {
  // Linear in the unit's parameters, with no cost per launch: the engine runs the device steps
  // of consecutive units as one fused launch (engine.cc, run_tail), whose time is their sum.
  const Plan& plan = *ctx_.plan;
  StepTimeParts t;
  // The optimizer's share: 1/d of the unit under ZeRO >= 1.
  const double params = plan.zero_stage >= 1
                            ? static_cast<double>(unit.params) / static_cast<double>(plan.dp)
                            : static_cast<double>(unit.params);
  const UnitOffloadBytes b = unit_offload_bytes(plan, unit.params, ctx_.rates.element_bytes);
  if (plan.offload.optimizer == OffloadTier::kNone) {
    t.optimizer_s = device_optimizer_s(ctx_, params);
    t.offload_s = offload_link_time(ctx_, b.optimizer);
    return t;
  }
  t.optimizer_s = cpu_optimizer_s(ctx_, params);
  const double nvme_s = offload_link_time(ctx_, b.optimizer_nvme);
  const TransferBytes pcie{.device_to_host = b.optimizer.device_to_host,
                           .host_to_device = b.optimizer.host_to_device};
  t.offload_s = offload_link_time(ctx_, pcie) + std::max(nvme_s - t.optimizer_s, 0.0);
  return t;
}

StepTimeParts TimeModelCosts::tail(const RankProgram& rank, const ProgramOp& op) const {
  const Plan& plan = *ctx_.plan;
  StepTimeParts t;
  switch (op.kind) {
    case Kind::kTiedEmbeddingSum: {
      const double bytes = static_cast<double>(tied_copy_params_per_tp_rank(*ctx_.model, plan.tp)) *
                           gradient_bytes();
      t.dp_comm_s = group_collective_time(*ctx_.cluster, ctx_.profile, CollectiveOp::kAllReduce,
                                          bytes, 2, plan.tp * plan.dp * (plan.pp - 1),
                                          plan.world_size())
                        .total_s();
      return t;
    }
    case Kind::kGradNorm:
      t.dp_comm_s = group_collective_time(*ctx_.cluster, ctx_.profile, CollectiveOp::kAllReduce,
                                          4.0, plan.world_size(), 1, plan.world_size())
                        .total_s();
      return t;
    case Kind::kOptimizerStep: return optimizer_step(unit_of(rank, op.unit));
    case Kind::kGatherParams:
      t.dp_comm_s = dp_collective_s(CollectiveOp::kAllGather,
                                    static_cast<double>(unit_of(rank, op.unit).params) *
                                        ctx_.rates.element_bytes);
      return t;
    case Kind::kReduceGrads:
    case Kind::kOffloadGrads: return state_move(rank, op.kind, op.unit);
    default:
      throw std::logic_error(fmt::format("op costs: {} is not a tail op", to_string(op.kind)));
  }
}

}  // namespace strata
