// Step-level time primitives: TP and pipeline communication, offload bytes and their link
// times, the optimizer step (time_model.h). What overlaps with what is the simulator's.
#include "cost_model/pricing/time_model.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "cost_model/memory/memory_model.h"

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

double per_gpu_share(double node_rate, std::int64_t ranks_per_node) {
  return node_rate / static_cast<double>(std::max<std::int64_t>(ranks_per_node, 1));
}

}  // namespace

TimeContext make_time_context(const ModelSpec& model, const ClusterSpec& cluster,
                              const TrainSpec& train, const Plan& plan, const Profile* profile,
                              const LayerKernels& kernels, std::int64_t node_ranks) {
  TimeContext ctx;
  ctx.model = &model;
  ctx.cluster = &cluster;
  ctx.train = &train;
  ctx.plan = &plan;
  ctx.profile = profile;
  ctx.kernels = kernels;
  ctx.micro_batches = plan.micro_batches(train);
  ctx.ranks_per_node = std::max(plan_ranks_per_node(plan, cluster), node_ranks);
  ctx.rates = device_rates(cluster, train, profile, ctx.ranks_per_node);
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
                                  plan.tp, 1, plan.world_size()).total_s() +
            group_collective_time(*ctx.cluster, ctx.profile, CollectiveOp::kReduceScatter, bytes,
                                  plan.tp, 1, plan.world_size()).total_s();
  } else {
    one_s = group_collective_time(*ctx.cluster, ctx.profile, CollectiveOp::kAllReduce, bytes,
                                  plan.tp, 1, plan.world_size()).total_s();
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

double offload_link_time(const TimeContext& ctx, const TransferBytes& bytes) {
  return link_time(bytes, link_rates(ctx));
}

UnitOffloadBytes unit_offload_bytes(const Plan& plan, std::int64_t unit_params,
                                    double element_bytes) {
  UnitOffloadBytes u;
  const OffloadPlan& off = plan.offload;
  if (off == OffloadPlan{}) return u;
  const std::int64_t d = plan.dp;
  constexpr double kF = 4;  // fp32 bytes: the optimizer state (master params, m, v)
  const double e = element_bytes;
  const double shard = static_cast<double>((unit_params + d - 1) / d);
  const double part = plan.zero_stage >= 1 ? shard : shard * static_cast<double>(d);
  const bool params_off = plan.zero_stage == 3 && off.params != OffloadTier::kNone;
  const bool grads_off = plan.zero_stage >= 2 && off.gradients != OffloadTier::kNone;
  if (params_off) {
    u.fetch.host_to_device = shard * e;
    if (off.params == OffloadTier::kNvme) u.fetch.nvme_to_host = shard * e;
  }
  if (grads_off) {
    u.grads_down.device_to_host = shard * e;
    if (off.gradients == OffloadTier::kNvme) {
      u.grads_down.host_to_nvme = shard * e;
      u.grads_down.nvme_to_host = shard * e;  // read back by the next accumulation or the step
    }
  }
  TransferBytes& t = u.optimizer;
  if (off.optimizer != OffloadTier::kNone) {
    if (!grads_off) t.device_to_host = part * e;
    if (!params_off) t.host_to_device = part * e;
    double nvme_arrays = off.optimizer == OffloadTier::kNvme ? 2 : 0;  // m, v
    const OffloadTier master = params_off ? off.params : off.optimizer;
    if (master == OffloadTier::kNvme) nvme_arrays += 1;
    u.optimizer_nvme.nvme_to_host = nvme_arrays * part * kF;
    u.optimizer_nvme.host_to_nvme = nvme_arrays * part * kF;
    t.nvme_to_host = u.optimizer_nvme.nvme_to_host;
    t.host_to_nvme = u.optimizer_nvme.host_to_nvme;
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
  return u;
}

namespace {

void add_bytes(TransferBytes& to, const TransferBytes& from, double k) {
  to.device_to_host += k * from.device_to_host;
  to.host_to_device += k * from.host_to_device;
  to.host_to_nvme += k * from.host_to_nvme;
  to.nvme_to_host += k * from.nvme_to_host;
}

}  // namespace

TransferBytes offload_traffic(const ModelSpec& model, const Plan& plan, const TrainSpec& train,
                              std::int64_t pp_rank, double element_bytes) {
  TransferBytes traffic;
  if (plan.offload == OffloadPlan{}) return traffic;
  const StageParams stage = stage_params(model, plan, pp_rank);
  const double m = static_cast<double>(plan.micro_batches(train));
  const bool first = pp_rank == 0;  // the embedding (virtual stage 0)
  const bool last = pp_rank == plan.pp - 1;
  struct Unit {
    std::int64_t n;     // parameters on one TP rank
    double count;       // such units on the rank
    double fetches;     // ZeRO-3 gathers per step, each fetching the shard
    double grad_downs;
  };
  std::vector<Unit> units;
  const std::int64_t per_layer = stage.layers > 0 ? stage.layer_params / stage.layers : 0;
  const double layer_downs = plan.sequence_parallel ? 1 : m;
  if (stage.layers > 0) {
    units.push_back({per_layer, static_cast<double>(stage.layers), 2 * m, layer_downs});
  }
  if (stage.embedding_params > 0) {
    // The embedding is gathered once per micro-batch, and once more by the head when p = 1;
    // the tied copy (last stage, p > 1) once per micro-batch by the head.
    units.push_back({stage.embedding_params, 1, first && last ? 2 * m : m, 1});
  }
  if (stage.final_norm_params > 0) units.push_back({stage.final_norm_params, 1, 2 * m, 1});
  for (const Unit& u : units) {
    const UnitOffloadBytes b = unit_offload_bytes(plan, u.n, element_bytes);
    add_bytes(traffic, b.fetch, u.count * u.fetches);
    add_bytes(traffic, b.grads_down, u.count * u.grad_downs);
    add_bytes(traffic, b.optimizer, u.count);
  }
  return traffic;
}

TransferBytes offload_transfer_bytes(const ModelSpec& model, const Plan& plan,
                                     const TrainSpec& train, std::int64_t pp_rank) {
  return offload_traffic(model, plan, train, pp_rank, 4.0);
}

}  // namespace strata
