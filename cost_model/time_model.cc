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

double per_gpu_share(double node_rate, std::int64_t ranks_per_node);

// Offload link rates, bytes/s: the Profile's measured ones, else the cluster's (PCIe per GPU,
// the node's NVMe shared by its GPUs).
struct LinkRates {
  double d2h = 0, h2d = 0, nvme_read = 0, nvme_write = 0;
  const ClusterSpec* cluster = nullptr;
};
LinkRates link_rates(const TimeContext& ctx) {
  const Profile* pr = ctx.profile;
  const ClusterSpec& cl = *ctx.cluster;
  LinkRates r;
  r.cluster = &cl;
  r.d2h = pr != nullptr && pr->device_to_host_bytes_per_s > 0 ? pr->device_to_host_bytes_per_s
                                                             : cl.host.pcie_bandwidth_bytes_per_s;
  r.h2d = pr != nullptr && pr->host_to_device_bytes_per_s > 0 ? pr->host_to_device_bytes_per_s
                                                             : cl.host.pcie_bandwidth_bytes_per_s;
  r.nvme_read = pr != nullptr && pr->nvme_read_bytes_per_s > 0
                    ? pr->nvme_read_bytes_per_s
                    : per_gpu_share(cl.nvme.read_bytes_per_s, ctx.ranks_per_node);
  r.nvme_write = pr != nullptr && pr->nvme_write_bytes_per_s > 0
                     ? pr->nvme_write_bytes_per_s
                     : per_gpu_share(cl.nvme.write_bytes_per_s, ctx.ranks_per_node);
  return r;
}

// Sum over the links of bytes / rate; a link with bytes to carry must have a rate > 0.
double link_time(const TransferBytes& b, const LinkRates& r) {
  const auto one = [&](double bytes, double rate, const char* key) {
    if (bytes <= 0) return 0.0;
    if (!(rate > 0)) {
      throw ConfigError(fmt::format("cluster '{}': {} must be > 0 for this offload plan, got {}",
                                    r.cluster->name, key, rate));
    }
    return bytes / rate;
  };
  return one(b.device_to_host, r.d2h, "host.pcie_bandwidth_gb_per_s") +
         one(b.host_to_device, r.h2d, "host.pcie_bandwidth_gb_per_s") +
         one(b.host_to_nvme, r.nvme_write, "nvme.write_bandwidth_gb_per_s") +
         one(b.nvme_to_host, r.nvme_read, "nvme.read_bandwidth_gb_per_s");
}

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
  ctx.ranks_per_node = plan_ranks_per_node(plan, cluster);
  ctx.rates = device_rates(cluster, train, profile, ctx.ranks_per_node);
  ctx.serial_comm = cluster.backend == Backend::kCpu;
  const double busy = static_cast<double>(ctx.ranks_per_node) *
                     static_cast<double>(std::max<std::int64_t>(
                         profile != nullptr ? profile->threads_per_rank : 1, 1));
  const double cores = static_cast<double>(cluster.host.cpu_cores);
  if (profile != nullptr && profile->time_sliced_sync_s > 0 &&
      cluster.backend == Backend::kCpu && cores > 0 && busy > cores) {
    // A swapped-out peer is behind the other ranks of its core: busy / cores - 1 of them.
    const double wait_s = profile->time_sliced_sync_s * (busy / cores - 1.0);
    auto adjusted = std::make_shared<Profile>(*profile);
    for (CollectiveFit& fit : adjusted->collectives) fit.latency_s += wait_s;
    ctx.time_sliced_profile = adjusted;
    ctx.profile = adjusted.get();
  }
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
  // backward; full recomputation replays the forward's two, or only the attention's when it
  // stops before fc2 (LayerKernels::recompute_skips_output).
  comm.forward_s = 2.0 * one_s;
  comm.backward_s = 2.0 * one_s;
  if (plan.recompute == Recompute::kFull) {
    comm.recompute_s = (ctx.kernels.recompute_skips_output ? 1.0 : 2.0) * one_s;
  }
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
    case Recompute::kFull: {
      const double ops = ctx.kernels.recompute_skips_output ? kLayerForwardOps - kLayerOutputOps
                                                            : kLayerForwardOps;
      w.recompute_s = layers * (layer.full_recompute_s(ctx.kernels) + ops * op_overhead);
      break;
    }
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
    if (plan.offload.params != OffloadTier::kNone) {
      const TransferBytes fetch =
          offload_traffic(model, plan, *ctx.train, pp_rank, ctx.rates.element_bytes).fetch;
      const double passes = 2.0 * static_cast<double>(std::max<std::int64_t>(ctx.micro_batches, 1)) *
                            static_cast<double>(plan.virtual_stages);
      w.fetch_pass.host_to_device = fetch.host_to_device / passes;
      w.fetch_pass.nvme_to_host = fetch.nvme_to_host / passes;
    }
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

  // Offloaded parameters: the pass's shard bytes (ChunkWork::fetch_pass, from
  // offload_traffic) over PCIe, and first from NVMe (read then copy: the times add).
  const LinkRates links = link_rates(ctx);
  z.fetch_pass_s = link_time(work.fetch_pass, links);

  const bool full_recompute = plan.recompute == Recompute::kFull;
  z.backward_gathers = full_recompute ? 2 : 1;
  // The recomputation reuses the backward's fetched shard (offload_transfer_bytes: 2 m
  // fetches a layer), so only the DP gathers double under full recompute.
  z.backward_prefetched = !full_recompute;
  const double first_unit_s =
      z.unit_gather_s + (work.layers > 0 ? z.fetch_pass_s / layers : z.fetch_pass_s);
  z.forward_comm_s = z.gather_pass_s + z.fetch_pass_s;
  z.backward_comm_s = static_cast<double>(z.backward_gathers) * z.gather_pass_s +
                      z.fetch_pass_s + z.reduce_scatter_s;
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
        static_cast<double>(z.backward_gathers) * z.gather_pass_s + z.fetch_pass_s +
        units * exposed_after_overlap(unit_scatter_s, unit_backward_s, bucket_fraction);
  }
  // The offload fetches' share of the exposed time, in proportion to their share of traffic.
  const double fwd_fetch = z.fetch_pass_s;
  const double bwd_fetch = z.fetch_pass_s;
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
  // Offload: the bytes of offload_traffic other than the passes' fetches, over the links.
  const TransferBytes bytes =
      offload_traffic(*ctx.model, plan, *ctx.train, pp_rank, ctx.rates.element_bytes).rest;
  const bool optimizer_off = plan.offload.optimizer != OffloadTier::kNone;
  if (bytes.empty() && !optimizer_off) {
    tail.optimizer_s = device_optimizer_s(ctx, opt_params);
    return tail;
  }
  const LinkRates links = link_rates(ctx);
  tail.d2h_s = link_time({.device_to_host = bytes.device_to_host}, links);
  tail.h2d_s = link_time({.host_to_device = bytes.host_to_device}, links);
  tail.nvme_s = link_time({.host_to_nvme = bytes.host_to_nvme, .nvme_to_host = bytes.nvme_to_host},
                          links);
  // Gradients offloaded under ZeRO >= 2 go down after every micro-batch's backward (m times,
  // a layer's; once with sequence parallel): hidden behind all m backwards but the step's
  // last bucket, like ZeRO-2's reduce-scatters. Otherwise they go down once, during the last
  // backward.
  const bool per_micro_batch = plan.zero_stage >= 2 &&
                               plan.offload.gradients != OffloadTier::kNone &&
                               !plan.sequence_parallel;
  const double m = static_cast<double>(std::max<std::int64_t>(ctx.micro_batches, 1));
  const double d2h_window_s = per_micro_batch ? m * window_s : window_s;
  const double d2h_tail_fraction = per_micro_batch ? bucket_fraction / m : bucket_fraction;
  if (optimizer_off) tail.cpu_step_s = cpu_optimizer_s(ctx, opt_params);
  // NVMe I/O pipelined with the CPU step (ZeRO-Infinity): only its excess is exposed; the
  // updated params' copy back up is exposed.
  const double step_s = std::max(tail.nvme_s, tail.cpu_step_s);
  tail.optimizer_s = optimizer_off ? tail.cpu_step_s : device_optimizer_s(ctx, opt_params);
  tail.offload_exposed_s =
      exposed_after_overlap(tail.d2h_s, d2h_window_s, std::min(d2h_tail_fraction, 1.0)) +
      (step_s - tail.cpu_step_s) + tail.h2d_s;
  return tail;
}

TransferBytes OffloadTraffic::total() const {
  return {.device_to_host = fetch.device_to_host + rest.device_to_host,
          .host_to_device = fetch.host_to_device + rest.host_to_device,
          .host_to_nvme = fetch.host_to_nvme + rest.host_to_nvme,
          .nvme_to_host = fetch.nvme_to_host + rest.nvme_to_host};
}

TransferBytes offload_transfer_bytes(const ModelSpec& model, const Plan& plan,
                                     const TrainSpec& train, std::int64_t pp_rank) {
  return offload_traffic(model, plan, train, pp_rank, 4.0).total();
}

OffloadTraffic offload_traffic(const ModelSpec& model, const Plan& plan, const TrainSpec& train,
                               std::int64_t pp_rank, double element_bytes) {
  OffloadTraffic traffic;
  TransferBytes& t = traffic.rest;
  const OffloadPlan& off = plan.offload;
  if (off == OffloadPlan{}) return traffic;
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

  constexpr double kF = 4;  // fp32 bytes: the optimizer state (master params, m, v)
  const double e = element_bytes;  // a parameter / gradient element moved over PCIe
  const bool params_off = plan.zero_stage == 3 && off.params != OffloadTier::kNone;
  const bool grads_off = plan.zero_stage >= 2 && off.gradients != OffloadTier::kNone;
  const bool opt_off = off.optimizer != OffloadTier::kNone;
  for (const Unit& u : units) {
    const double shard = static_cast<double>((u.n + d - 1) / d);
    const double part = plan.zero_stage >= 1 ? shard : shard * static_cast<double>(d);
    if (params_off) {
      traffic.fetch.host_to_device += u.gathers * shard * e;
      if (off.params == OffloadTier::kNvme) traffic.fetch.nvme_to_host += u.gathers * shard * e;
    }
    if (grads_off) {
      t.device_to_host += u.grad_downs * shard * e;
      if (off.gradients == OffloadTier::kNvme) {
        t.host_to_nvme += u.grad_downs * shard * e;
        t.nvme_to_host += u.grad_downs * shard * e;  // k - 1 accumulations + 1 for the step
      }
    }
    if (opt_off) {
      if (!grads_off) t.device_to_host += part * e;
      if (!params_off) t.host_to_device += part * e;
      double nvme_arrays = off.optimizer == OffloadTier::kNvme ? 2 : 0;  // m, v
      const OffloadTier master = params_off ? off.params : off.optimizer;
      if (master == OffloadTier::kNvme) nvme_arrays += 1;
      t.nvme_to_host += nvme_arrays * part * kF;
      t.host_to_nvme += nvme_arrays * part * kF;
    } else {
      if (grads_off) t.host_to_device += shard * e;
      if (params_off) {
        t.host_to_device += shard * e;
        t.device_to_host += shard * e;
        if (off.params == OffloadTier::kNvme) {
          t.nvme_to_host += shard * e;
          t.host_to_nvme += shard * e;
        }
      }
    }
  }
  return traffic;
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
