// Step-level time primitives: chunk work, TP/PP/DP/ZeRO communication, offload, optimizer,
// pipeline composition (time_model.h says what overlaps with what, and why).
#include "cost_model/time_model.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "cost_model/errors.h"
#include "cost_model/memory_model.h"

namespace strata {
namespace {

// Exposed part of `work_s` run concurrently with `window_s` of compute, where the last
// `tail_fraction` of the work can only start after the compute ends (one bucket).
double exposed_after_overlap(double work_s, double window_s, double tail_fraction) {
  const double tail_s = work_s * std::clamp(tail_fraction, 0.0, 1.0);
  return std::max(work_s - window_s, tail_s);
}

// Exposed time of prefetched per-unit communication `comm_s` (first unit `first_unit_s`
// cannot be prefetched) next to `compute_s` of compute: the first unit, then whichever of the
// remaining communication and the compute is longer, minus the compute itself.
double exposed_prefetched(double comm_s, double first_unit_s, double compute_s) {
  if (comm_s <= 0) return 0;
  const double first = std::min(first_unit_s, comm_s);
  return first + std::max(comm_s - first, compute_s) - compute_s;
}

double per_gpu_share(double node_rate, std::int64_t ranks_per_node) {
  return node_rate / static_cast<double>(std::max<std::int64_t>(ranks_per_node, 1));
}

}  // namespace

TimeContext make_time_context(const ModelSpec& model, const ClusterSpec& cluster,
                              const TrainSpec& train, const Plan& plan, const Profile* profile,
                              const LayerKernels& kernels) {
  TimeContext ctx;
  ctx.model = &model;
  ctx.cluster = &cluster;
  ctx.train = &train;
  ctx.plan = &plan;
  ctx.profile = profile;
  ctx.kernels = kernels;
  ctx.micro_batches = plan.micro_batches(train);
  ctx.ranks_per_node = std::min(plan.world_size(), cluster.gpus_per_node);
  ctx.rates = device_rates(cluster, train, profile, ctx.ranks_per_node);
  ctx.serial_comm = cluster.backend == Backend::kCpu;
  return ctx;
}

TpLayerComm tp_layer_comm(const TimeContext& ctx) {
  TpLayerComm comm;
  const Plan& plan = *ctx.plan;
  if (plan.tp <= 1) return comm;
  const double bytes = static_cast<double>(plan.micro_batch * ctx.model->seq_len *
                                           ctx.model->hidden) * ctx.rates.element_bytes;
  double one_s = 0;
  if (plan.sequence_parallel) {
    // All-gather (n-1)/n + reduce-scatter (n-1)/n = one all-reduce's bus bytes.
    one_s = group_collective_time(*ctx.cluster, ctx.profile, CollectiveOp::kAllGather, bytes,
                                  plan.tp, 1).total_s() +
            group_collective_time(*ctx.cluster, ctx.profile, CollectiveOp::kReduceScatter, bytes,
                                  plan.tp, 1).total_s();
  } else {
    one_s = group_collective_time(*ctx.cluster, ctx.profile, CollectiveOp::kAllReduce, bytes,
                                  plan.tp, 1).total_s();
  }
  // Two per block direction: after attention and after the MLP (forward), before each in
  // backward; full recomputation replays the forward's two.
  comm.forward_s = 2.0 * one_s;
  comm.backward_s = 2.0 * one_s;
  comm.recompute_s = plan.recompute == Recompute::kFull ? 2.0 * one_s : 0.0;
  return comm;
}

P2pTransfer p2p_transfer(const TimeContext& ctx) {
  P2pTransfer p2p;
  const Plan& plan = *ctx.plan;
  if (plan.pp <= 1) return p2p;
  const ClusterSpec& cluster = *ctx.cluster;
  double bytes = static_cast<double>(plan.micro_batch * ctx.model->seq_len *
                                     ctx.model->hidden) * ctx.rates.element_bytes;
  // With sequence parallel the boundary activation is already sharded s/t per TP rank.
  if (plan.sequence_parallel) bytes /= static_cast<double>(plan.tp);
  // The pipeline is paced by its slowest hop: any stage boundary across nodes makes every
  // hop's period that of the inter-node link.
  p2p.link = plan.world_size() > cluster.gpus_per_node ? LinkClass::kInterNode
                                                       : LinkClass::kIntraNode;
  const bool scatter_gather =
      p2p.link == LinkClass::kInterNode && plan.tp > 1 && !plan.sequence_parallel;
  if (scatter_gather) {
    p2p.gather_s = collective_time(CollectiveOp::kAllGather, bytes, plan.tp,
                                   link_rate(cluster, LinkClass::kIntraNode,
                                             CollectiveOp::kAllGather, plan.tp, ctx.profile))
                       .total_s();
    bytes /= static_cast<double>(plan.tp);
  }
  p2p.bytes = bytes;
  p2p.transfer_s = collective_time(CollectiveOp::kP2p, bytes, 2,
                                   link_rate(cluster, p2p.link, CollectiveOp::kP2p, 2,
                                             ctx.profile))
                       .total_s();
  return p2p;
}

ChunkWork chunk_work(const TimeContext& ctx, std::int64_t pp_rank, std::int64_t chunk) {
  const Plan& plan = *ctx.plan;
  const ModelSpec& model = *ctx.model;
  const std::int64_t virtual_stages = plan.pp * plan.virtual_stages;
  const std::int64_t vstage = chunk * plan.pp + pp_rank;  // Megatron's interleaved assignment
  ChunkWork w;
  w.layers = model.layers / virtual_stages;
  w.has_embedding = vstage == 0;
  w.has_head = vstage == virtual_stages - 1;

  // Parameters of this chunk on one TP rank: its layers, plus what stage_params puts on the
  // rank besides layers (embedding on rank 0, final norm and tied copy on rank p-1) on the
  // chunk that uses it.
  const StageParams stage = stage_params(model, plan.tp, plan.pp, plan.virtual_stages, pp_rank);
  const double layer_params = static_cast<double>(layer_params_per_tp_rank(model, plan.tp));
  w.params = static_cast<double>(w.layers) * layer_params;
  if (w.has_embedding || w.has_head) {
    w.params += static_cast<double>(stage.embedding_params + stage.final_norm_params);
  }

  const LayerForward layer = layer_forward(model, plan.micro_batch, plan.tp,
                                           plan.sequence_parallel, ctx.kernels, ctx.rates);
  const double layers = static_cast<double>(w.layers);
  const double op_overhead = ctx.profile != nullptr ? ctx.profile->op_overhead_s : 0.0;
  // ~12 kernels per layer forward (6 GEMMs, 2 LayerNorms, softmax, GeLU, 2 residual adds).
  const double layer_fwd_s = layer.time_s() + kLayerForwardOps * op_overhead;
  w.compute_forward_s = layers * layer_fwd_s;
  if (w.has_embedding) w.compute_forward_s += embedding_forward_s(model, plan.micro_batch, ctx.rates);
  if (w.has_head) w.compute_forward_s += head_forward(model, plan.micro_batch, plan.tp, ctx.rates).time_s();
  // Backward = 2 x forward without a Profile: each GEMM becomes two (input and weight
  // gradients) of the same FLOPs; the memory-bound kernels read the saved input and the
  // gradient and write one. With one: each op's backward at its own measured shape and rate
  // (compute_model.h), ~2 x as many ops as the forward.
  if (ctx.profile == nullptr) {
    w.compute_backward_s = 2.0 * w.compute_forward_s;
  } else {
    const LayerBackward layer_bwd = layer_backward(model, plan.micro_batch, plan.tp,
                                                   plan.sequence_parallel, ctx.kernels, ctx.rates);
    w.compute_backward_s = layers * (layer_bwd.time_s() + kLayerBackwardOps * op_overhead);
    if (w.has_embedding) w.compute_backward_s += 2.0 * embedding_forward_s(model, plan.micro_batch, ctx.rates);
    if (w.has_head) w.compute_backward_s += head_backward_s(model, plan.micro_batch, plan.tp, ctx.rates);
  }
  switch (plan.recompute) {
    case Recompute::kNone: break;
    case Recompute::kSelective: w.recompute_s = layers * layer.attention_core_s(); break;
    case Recompute::kFull: w.recompute_s = layers * layer_fwd_s; break;
  }

  const TpLayerComm tp = tp_layer_comm(ctx);
  w.tp_forward_s = layers * tp.forward_s;
  w.tp_backward_s = layers * (tp.backward_s + tp.recompute_s);
  if (plan.tp > 1 && (w.has_embedding || w.has_head)) {
    // Vocab-parallel embedding all-reduces its output (forward); the output layer's input
    // gradient is all-reduced (backward). One s b h all-reduce each.
    const double one = tp.forward_s / 2.0;
    if (w.has_embedding) w.tp_forward_s += one;
    if (w.has_head) w.tp_backward_s += one;
  }

  if (plan.zero_stage == 3 && plan.dp > 1) {
    w.zero3 = zero3_chunk_comm(ctx, w, layer_params);
    w.offload_forward_s = w.zero3.fetch_exposed_forward_s;
    w.zero3_forward_s = w.zero3.exposed_forward_s - w.offload_forward_s;
    w.offload_backward_s = w.zero3.fetch_exposed_backward_s;
    w.zero3_backward_s = w.zero3.exposed_backward_s - w.offload_backward_s;
  }

  if (plan.pp > 1) {
    // A chunk sends its output forward unless it is the last virtual stage, and its input
    // gradient backward unless it is the first.
    w.sends = (w.has_head ? 0.0 : 1.0) + (w.has_embedding ? 0.0 : 1.0);
  }
  return w;
}

Zero3ChunkComm zero3_chunk_comm(const TimeContext& ctx, const ChunkWork& work,
                                double layer_params) {
  const Plan& plan = *ctx.plan;
  Zero3ChunkComm z;
  if (plan.zero_stage != 3 || plan.dp <= 1) return z;
  const double c = ctx.rates.element_bytes;
  const auto dp_time = [&](CollectiveOp op, double bytes) {
    return group_collective_time(*ctx.cluster, ctx.profile, op, bytes, plan.dp, plan.tp)
        .total_s();
  };
  // Units: each layer, and the embedding / final-norm parameters where the chunk has them.
  const double layers = static_cast<double>(work.layers);
  const double extra_params = std::max(work.params - layers * layer_params, 0.0);
  z.unit_gather_s = dp_time(CollectiveOp::kAllGather, layer_params * c);
  z.gather_pass_s = layers * z.unit_gather_s +
                    (extra_params > 0 ? dp_time(CollectiveOp::kAllGather, extra_params * c) : 0.0);
  z.reduce_scatter_s =
      layers * dp_time(CollectiveOp::kReduceScatter, layer_params * c) +
      (extra_params > 0 ? dp_time(CollectiveOp::kReduceScatter, extra_params * c) : 0.0);

  // Offloaded parameters: the rank's 1/d partition over PCIe (and first from NVMe) per pass.
  if (plan.offload.params != OffloadTier::kNone) {
    const double part_bytes = work.params * c / static_cast<double>(plan.dp);
    const double pcie = ctx.profile != nullptr && ctx.profile->host_to_device_bytes_per_s > 0
                            ? ctx.profile->host_to_device_bytes_per_s
                            : ctx.cluster->host.pcie_bandwidth_bytes_per_s;
    z.fetch_pass_s = part_bytes / pcie;
    if (plan.offload.params == OffloadTier::kNvme) {
      const double nvme = ctx.profile != nullptr && ctx.profile->nvme_read_bytes_per_s > 0
                              ? ctx.profile->nvme_read_bytes_per_s
                              : per_gpu_share(ctx.cluster->nvme.read_bytes_per_s,
                                              ctx.ranks_per_node);
      z.fetch_pass_s += part_bytes / nvme;
    }
  }

  const bool full_recompute = plan.recompute == Recompute::kFull;
  z.backward_gathers = full_recompute ? 2 : 1;
  z.backward_prefetched = !full_recompute;
  const double first_unit_s =
      z.unit_gather_s + (work.layers > 0 ? z.fetch_pass_s / layers : z.fetch_pass_s);
  z.forward_comm_s = z.gather_pass_s + z.fetch_pass_s;
  z.backward_comm_s =
      static_cast<double>(z.backward_gathers) * (z.gather_pass_s + z.fetch_pass_s) +
      z.reduce_scatter_s;
  z.exposed_forward_s = exposed_prefetched(z.forward_comm_s, first_unit_s, work.compute_forward_s);
  if (ctx.serial_comm) {
    // Blocking gathers before each pass, exposed whole; the gradients are reduce-scattered
    // once per step at the end (tail_work), not per micro-batch.
    z.backward_comm_s -= z.reduce_scatter_s;
    z.exposed_forward_s = z.forward_comm_s;
    z.exposed_backward_s = z.backward_comm_s;
  } else if (z.backward_prefetched) {
    z.exposed_backward_s = exposed_prefetched(z.backward_comm_s, first_unit_s,
                                              work.compute_backward_s + work.recompute_s);
  } else {
    // Demand-fetched gathers are exposed whole. A layer's gradients are reduce-scattered in
    // buckets as its backward produces them, so the reduction runs beside the rest of that
    // layer's backward (as the DP reduction does beside the last backward); what it cannot
    // hide (the layer's last bucket, or its excess over the layer's backward compute) delays
    // the next layer's gather on the shared link.
    const double units = std::max(layers, 1.0);
    const double unit_scatter_s = z.reduce_scatter_s / units;
    const double unit_backward_s = work.compute_backward_s / units;
    const double unit_grad_bytes = layer_params * c;
    const double bucket_fraction =
        unit_grad_bytes > 0 ? ctx.grad_bucket_bytes / unit_grad_bytes : 1.0;
    z.exposed_backward_s =
        static_cast<double>(z.backward_gathers) * (z.gather_pass_s + z.fetch_pass_s) +
        units * exposed_after_overlap(unit_scatter_s, unit_backward_s, bucket_fraction);
  }
  // The offload fetches' share of the exposed time, in proportion to their share of traffic.
  const double fwd_fetch = z.fetch_pass_s;
  const double bwd_fetch = static_cast<double>(z.backward_gathers) * z.fetch_pass_s;
  z.fetch_exposed_forward_s =
      z.forward_comm_s > 0 ? z.exposed_forward_s * fwd_fetch / z.forward_comm_s : 0.0;
  z.fetch_exposed_backward_s =
      z.backward_comm_s > 0 ? z.exposed_backward_s * bwd_fetch / z.backward_comm_s : 0.0;
  return z;
}

double device_optimizer_s(const TimeContext& ctx, double params) {
  if (ctx.profile != nullptr && ctx.profile->device_adam_params_per_s > 0) {
    return params / (ctx.profile->device_adam_params_per_s * ctx.rates.compute_share);
  }
  const double c = ctx.rates.element_bytes;
  // bf16: fp32 master p, m, v read (12) + gradient (c) ; p, m, v written (12) + copy (c).
  // fp32: the params are the master: p, m, v, g read (16), p, m, v written (12).
  const double bytes_per_param = c == 4 ? 28.0 : 24.0 + 2.0 * c;
  return params * bytes_per_param / ctx.rates.memory_bytes_per_s;
}

double cpu_optimizer_s(const TimeContext& ctx, double params) {
  if (ctx.profile != nullptr && ctx.profile->cpu_adam_params_per_s > 0) {
    return params / per_gpu_share(ctx.profile->cpu_adam_params_per_s, ctx.ranks_per_node);
  }
  const HostSpec& host = ctx.cluster->host;
  const double memory_bw = per_gpu_share(host.memory_bandwidth_bytes_per_s, ctx.ranks_per_node);
  const double flops = per_gpu_share(host.cpu_flops, ctx.ranks_per_node);
  if (!(memory_bw > 0) || !(flops > 0)) {
    throw ConfigError(fmt::format(
        "cluster '{}': host.memory_bandwidth_gb_per_s and host.cpu_gflops must be > 0 for "
        "optimizer offload, got {} and {}",
        ctx.cluster->name, host.memory_bandwidth_bytes_per_s, host.cpu_flops));
  }
  // AdamW: ~12 FLOP per parameter (2 moment updates, sqrt, divide, decay, update).
  return std::max(params * 30.0 / memory_bw, params * 12.0 / flops);
}

TailWork tail_work(const TimeContext& ctx, std::int64_t pp_rank, double params,
                   double window_s) {
  TailWork tail;
  const Plan& plan = *ctx.plan;
  const ClusterSpec& cluster = *ctx.cluster;
  const double c = ctx.rates.element_bytes;
  const double grad_bytes = params * c;
  const double bucket_fraction = grad_bytes > 0 ? ctx.grad_bucket_bytes / grad_bytes : 1.0;
  const auto dp_time = [&](CollectiveOp op, double bytes) {
    return group_collective_time(cluster, ctx.profile, op, bytes, plan.dp, plan.tp).total_s();
  };

  // The reduction's overlap window and its unhidden last bucket (as a fraction of it).
  double reduce_window_s = window_s;
  double reduce_tail_fraction = bucket_fraction;
  if (plan.dp > 1 && ctx.serial_comm) {
    // CPU backend (TimeContext::serial_comm): one reduction per step after the last backward,
    // exposed; ZeRO 1/2 then all-gather the updated parameters.
    tail.dp_reduce_s = dp_time(plan.zero_stage >= 2 ? CollectiveOp::kReduceScatter
                                                    : CollectiveOp::kAllReduce,
                               grad_bytes);
    reduce_window_s = 0;
    reduce_tail_fraction = 1;
    if (plan.zero_stage == 1 || plan.zero_stage == 2) {
      tail.dp_gather_s = dp_time(CollectiveOp::kAllGather, grad_bytes);
    }
  } else if (plan.dp > 1 && plan.zero_stage < 3) {
    // ZeRO 0/1: all-reduce the accumulated gradients once per step (stage 1 then updates its
    // 1/d and all-gathers the params, DeepSpeed's stage-1 order). ZeRO 2: the gradient exists
    // only as the rank's partition, so every micro-batch's gradients are reduce-scattered as
    // produced (DeepSpeed stage 2): m reduce-scatters, each hidden behind its own backward
    // except that only the step's last bucket is certainly exposed; then the all-gather.
    if (plan.zero_stage == 2) {
      const double m = static_cast<double>(std::max<std::int64_t>(ctx.micro_batches, 1));
      tail.dp_reduce_s = m * dp_time(CollectiveOp::kReduceScatter, grad_bytes);
      reduce_window_s = m * window_s;
      reduce_tail_fraction = bucket_fraction / m;
    } else {
      tail.dp_reduce_s = dp_time(CollectiveOp::kAllReduce, grad_bytes);
    }
    if (plan.zero_stage >= 1) tail.dp_gather_s = dp_time(CollectiveOp::kAllGather, grad_bytes);
  }
  if (plan.pp > 1 && (pp_rank == 0 || pp_rank == plan.pp - 1)) {
    // The tied word embedding lives on the first and last stage; Megatron all-reduces its
    // gradient between them after the DP reduction: V h / t elements over 2 ranks.
    const StageParams first = stage_params(*ctx.model, plan.tp, plan.pp, plan.virtual_stages, 0);
    const double embedding_bytes =
        static_cast<double>(first.embedding_params - ctx.model->seq_len * ctx.model->hidden) * c;
    tail.embedding_sync_s =
        group_collective_time(cluster, ctx.profile, CollectiveOp::kAllReduce, embedding_bytes, 2,
                              plan.tp * plan.dp * (plan.pp - 1))
            .total_s();
  }
  tail.dp_exposed_s = (tail.dp_reduce_s > 0 ? exposed_after_overlap(tail.dp_reduce_s,
                                                                    reduce_window_s,
                                                                    reduce_tail_fraction)
                                            : 0.0) +
                      tail.dp_gather_s + tail.embedding_sync_s;

  // The optimizer's share: 1/d of the stage under ZeRO >= 1.
  const double opt_params =
      plan.zero_stage >= 1 ? params / static_cast<double>(plan.dp) : params;
  const double pcie_d2h = ctx.profile != nullptr && ctx.profile->device_to_host_bytes_per_s > 0
                              ? ctx.profile->device_to_host_bytes_per_s
                              : cluster.host.pcie_bandwidth_bytes_per_s;
  const double pcie_h2d = ctx.profile != nullptr && ctx.profile->host_to_device_bytes_per_s > 0
                              ? ctx.profile->host_to_device_bytes_per_s
                              : cluster.host.pcie_bandwidth_bytes_per_s;
  const double nvme_read = ctx.profile != nullptr && ctx.profile->nvme_read_bytes_per_s > 0
                               ? ctx.profile->nvme_read_bytes_per_s
                               : per_gpu_share(cluster.nvme.read_bytes_per_s, ctx.ranks_per_node);
  const double nvme_write =
      ctx.profile != nullptr && ctx.profile->nvme_write_bytes_per_s > 0
          ? ctx.profile->nvme_write_bytes_per_s
          : per_gpu_share(cluster.nvme.write_bytes_per_s, ctx.ranks_per_node);
  const bool optimizer_off = plan.offload.optimizer != OffloadTier::kNone;
  const bool grads_off = plan.offload.gradients != OffloadTier::kNone;
  if (optimizer_off || grads_off) {
    if (!(pcie_d2h > 0) || !(pcie_h2d > 0)) {
      throw ConfigError(fmt::format("cluster '{}': host.pcie_bandwidth_gb_per_s must be > 0 for "
                                    "offload, got {}",
                                    cluster.name, cluster.host.pcie_bandwidth_bytes_per_s));
    }
    // The rank's gradient partition goes down during the last backward.
    tail.d2h_s = opt_params * c / pcie_d2h;
  }
  if (optimizer_off) {
    tail.cpu_step_s = cpu_optimizer_s(ctx, opt_params);
    if (plan.offload.optimizer == OffloadTier::kNvme) {
      // fp32 master params, m, v: 12 bytes/param read before and written after the step.
      tail.nvme_s = opt_params * 12.0 / nvme_read + opt_params * 12.0 / nvme_write;
    }
    tail.h2d_s = opt_params * c / pcie_h2d;  // updated compute-precision params back up
  } else if (grads_off) {
    // Gradients parked off the device and brought back for the device optimizer.
    tail.h2d_s = opt_params * c / pcie_h2d;
  }
  if (plan.offload.gradients == OffloadTier::kNvme) {
    tail.nvme_s += opt_params * c / nvme_write + opt_params * c / nvme_read;
  }
  if (plan.offload.params != OffloadTier::kNone && plan.offload.params != OffloadTier::kCpu) {
    // NVMe-resident params: the updated partition is written back once per step.
    tail.nvme_s += opt_params * c / nvme_write;
  }
  if (optimizer_off || grads_off || tail.nvme_s > 0) {
    const double step_s = std::max(tail.nvme_s, tail.cpu_step_s);
    tail.optimizer_s = optimizer_off ? tail.cpu_step_s : device_optimizer_s(ctx, opt_params);
    tail.offload_exposed_s = exposed_after_overlap(tail.d2h_s, window_s, bucket_fraction) +
                             (step_s - tail.cpu_step_s) + tail.h2d_s;
  } else {
    tail.optimizer_s = device_optimizer_s(ctx, opt_params);
  }
  return tail;
}

TransferBytes offload_transfer_bytes(const ModelSpec& model, const Plan& plan,
                                     const TrainSpec& train, std::int64_t pp_rank) {
  TransferBytes t;
  const OffloadPlan& off = plan.offload;
  if (off == OffloadPlan{}) return t;
  const StageParams stage = stage_params(model, plan.tp, plan.pp, plan.virtual_stages, pp_rank);
  const double m = static_cast<double>(plan.micro_batches(train));
  const std::int64_t d = plan.dp;
  const bool first = pp_rank == 0;  // the embedding (virtual stage 0)
  const bool last = pp_rank == plan.pp - 1;
  struct Unit {
    std::int64_t n;  // parameters on one TP rank
    double gathers;  // ZeRO-3 gathers per step
    double grad_downs;
  };
  std::vector<Unit> units;
  const std::int64_t per_layer = stage.layers > 0 ? stage.layer_params / stage.layers : 0;
  const double layer_downs = plan.sequence_parallel ? 1 : m;
  for (std::int64_t l = 0; l < stage.layers; ++l) units.push_back({per_layer, 2 * m, layer_downs});
  if (stage.embedding_params > 0) {
    // The embedding is gathered once per micro-batch, and once more by the head when p = 1;
    // the tied copy (last stage, p > 1) once per micro-batch by the head.
    units.push_back({stage.embedding_params, first && last ? 2 * m : m, 1});
  }
  if (stage.final_norm_params > 0) units.push_back({stage.final_norm_params, 2 * m, 1});

  constexpr double kF = 4;  // fp32 bytes
  const bool params_off = plan.zero_stage == 3 && off.params != OffloadTier::kNone;
  const bool grads_off = plan.zero_stage >= 2 && off.gradients != OffloadTier::kNone;
  const bool opt_off = off.optimizer != OffloadTier::kNone;
  for (const Unit& u : units) {
    const double shard = static_cast<double>((u.n + d - 1) / d);
    const double part = plan.zero_stage >= 1 ? shard : shard * static_cast<double>(d);
    if (params_off) {
      t.host_to_device += u.gathers * shard * kF;
      if (off.params == OffloadTier::kNvme) t.nvme_to_host += u.gathers * shard * kF;
    }
    if (grads_off) {
      t.device_to_host += u.grad_downs * shard * kF;
      if (off.gradients == OffloadTier::kNvme) {
        t.host_to_nvme += u.grad_downs * shard * kF;
        t.nvme_to_host += u.grad_downs * shard * kF;  // k - 1 accumulations + 1 for the step
      }
    }
    if (opt_off) {
      if (!grads_off) t.device_to_host += part * kF;
      if (!params_off) t.host_to_device += part * kF;
      double nvme_arrays = off.optimizer == OffloadTier::kNvme ? 2 : 0;  // m, v
      const OffloadTier master = params_off ? off.params : off.optimizer;
      if (master == OffloadTier::kNvme) nvme_arrays += 1;
      t.nvme_to_host += nvme_arrays * part * kF;
      t.host_to_nvme += nvme_arrays * part * kF;
    } else {
      if (grads_off) t.host_to_device += shard * kF;
      if (params_off) {
        t.host_to_device += shard * kF;
        t.device_to_host += shard * kF;
        if (off.params == OffloadTier::kNvme) {
          t.nvme_to_host += shard * kF;
          t.host_to_nvme += shard * kF;
        }
      }
    }
  }
  return t;
}

PipelineTime pipeline_time(std::int64_t micro_batches, std::int64_t pp, std::int64_t v,
                           double work_per_micro_batch_s) {
  if (micro_batches < 1 || pp < 1 || v < 1) {
    throw InfeasiblePlan(fmt::format("pipeline_time: expected m, p, v >= 1, got m={} p={} v={}",
                                     micro_batches, pp, v));
  }
  PipelineTime t;
  t.busy_s = static_cast<double>(micro_batches) * work_per_micro_batch_s;
  t.bubble_s = static_cast<double>(pp - 1) / static_cast<double>(v) * work_per_micro_batch_s;
  return t;
}

double bubble_ratio(std::int64_t micro_batches, std::int64_t pp, std::int64_t v) {
  return static_cast<double>(pp - 1) / (static_cast<double>(v) * static_cast<double>(micro_batches));
}

}  // namespace strata
