// predict() and stage_op_times(): compose the time model's primitives (time_model.h) into
// per-rank op times and a step time, and the memory model into the Prediction's memory.
// predict() evaluates only the distinct pipeline ranks (the first, one middle, the last):
// middle ranks are identical, and the planner calls it for every candidate.
#include "cost_model/cost_model.h"

#include <algorithm>
#include <array>

#include "cost_model/memory_model.h"
#include "cost_model/time_model.h"
#include "cost_model/units.h"

namespace strata {
namespace {

LayerKernels kernels_for(const ClusterSpec& cluster, const CostModelOptions& options) {
  LayerKernels kernels;
  if (options.published) {
    kernels.attention = AttentionKernel::kMaterialized;
    kernels.dropout = true;
  } else {
    kernels.attention = cluster.backend == Backend::kCuda ? AttentionKernel::kFlash
                                                          : AttentionKernel::kMaterialized;
    kernels.dropout = false;
    kernels.separate_bias = cluster.backend == Backend::kCpu;
    kernels.recompute_skips_output = cluster.backend == Backend::kCpu;
  }
  return kernels;
}

// One pipeline rank, summed over its chunks, per micro-batch.
struct RankSums {
  std::int64_t pp_rank = 0;
  double work_s = 0;  // W: forward + backward + sends of all chunks, one micro-batch
  double compute_forward_s = 0, compute_backward_s = 0, recompute_s = 0;
  double tp_s = 0, zero3_s = 0, offload_s = 0, p2p_s = 0;
  double params = 0;
  TailWork tail;
  double tail_s() const { return tail.dp_exposed_s + tail.offload_exposed_s + tail.optimizer_s; }
};

RankSums rank_sums(const TimeContext& ctx, std::int64_t pp_rank, const P2pTransfer& p2p,
                   std::vector<ChunkOpTimes>* chunks_out) {
  const Plan& plan = *ctx.plan;
  RankSums r;
  r.pp_rank = pp_rank;
  for (std::int64_t c = 0; c < plan.virtual_stages; ++c) {
    const ChunkWork w = chunk_work(ctx, pp_rank, c);
    r.compute_forward_s += w.compute_forward_s;
    r.compute_backward_s += w.compute_backward_s;
    r.recompute_s += w.recompute_s;
    r.tp_s += w.tp_forward_s + w.tp_backward_s;
    r.zero3_s += w.zero3_forward_s + w.zero3_backward_s;
    r.offload_s += w.offload_forward_s + w.offload_backward_s;
    r.p2p_s += w.sends * p2p.total_s();
    r.params += w.params;
    if (chunks_out != nullptr) {
      ChunkOpTimes op;
      op.compute_forward_s = w.compute_forward_s;
      op.compute_backward_s = w.compute_backward_s;
      op.recompute_s = w.recompute_s;
      op.comm_forward_s = w.tp_forward_s + w.zero3_forward_s + w.offload_forward_s;
      op.comm_backward_s = w.tp_backward_s + w.zero3_backward_s + w.offload_backward_s;
      op.forward_s = w.forward_s();
      op.backward_s = w.backward_s();
      chunks_out->push_back(op);
    }
  }
  r.work_s = r.compute_forward_s + r.compute_backward_s + r.recompute_s + r.tp_s + r.zero3_s +
             r.offload_s + r.p2p_s;
  // The DP reduction and gradient offload hide behind the last micro-batch's backward.
  r.tail = tail_work(ctx, pp_rank, r.params, r.compute_backward_s + r.recompute_s);
  return r;
}

MemoryModelOptions memory_options(const CostModelOptions& options) {
  MemoryModelOptions memory;
  memory.published_activations = options.published;
  return memory;
}

}  // namespace

StageOpTimes stage_op_times(const ModelSpec& model, const ClusterSpec& cluster,
                            const TrainSpec& train, const Plan& plan, const Profile* profile,
                            const CostModelOptions& options) {
  plan.check(model, cluster, train);
  const TimeContext ctx =
      make_time_context(model, cluster, train, plan, profile, kernels_for(cluster, options));
  const P2pTransfer p2p = p2p_transfer(ctx);
  StageOpTimes times;
  times.p2p_s = p2p.total_s();
  times.micro_batches = ctx.micro_batches;
  times.ranks.reserve(static_cast<std::size_t>(plan.pp));
  for (std::int64_t r = 0; r < plan.pp; ++r) {
    RankOpTimes rank;
    rank.pp_rank = r;
    rank.chunks.reserve(static_cast<std::size_t>(plan.virtual_stages));
    const RankSums sums = rank_sums(ctx, r, p2p, &rank.chunks);
    rank.dp_sync_s = sums.tail.dp_exposed_s;
    rank.offload_s = sums.tail.offload_exposed_s;
    rank.optimizer_s = sums.tail.optimizer_s;
    times.ranks.push_back(std::move(rank));
  }
  return times;
}

StageOpTimes stage_op_times(const ModelSpec& model, const ClusterSpec& cluster,
                            const TrainSpec& train, const Plan& plan, const Profile* profile) {
  return stage_op_times(model, cluster, train, plan, profile, CostModelOptions{});
}

Prediction predict(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                   const Plan& plan, const Profile* profile, const CostModelOptions& options) {
  plan.check(model, cluster, train);
  const TimeContext ctx =
      make_time_context(model, cluster, train, plan, profile, kernels_for(cluster, options));
  const P2pTransfer p2p = p2p_transfer(ctx);

  // Distinct ranks: 0 (embedding), p-1 (head), and 1 standing for every middle rank.
  std::array<std::int64_t, 3> distinct{0, plan.pp - 1, plan.pp > 2 ? 1 : 0};
  std::array<RankSums, 3> sums;
  for (std::size_t i = 0; i < distinct.size(); ++i) sums[i] = rank_sums(ctx, distinct[i], p2p, nullptr);
  // The slowest rank paces the pipeline; the longest tail ends the step. Ties: lowest rank.
  const auto by_work = [](const RankSums& a, const RankSums& b) {
    return a.work_s < b.work_s || (a.work_s == b.work_s && a.pp_rank > b.pp_rank);
  };
  const auto by_tail = [](const RankSums& a, const RankSums& b) {
    return a.tail_s() < b.tail_s() || (a.tail_s() == b.tail_s() && a.pp_rank > b.pp_rank);
  };
  const RankSums& slowest = *std::max_element(sums.begin(), sums.end(), by_work);
  const RankSums& last = *std::max_element(sums.begin(), sums.end(), by_tail);

  const double m = static_cast<double>(ctx.micro_batches);
  const PipelineTime pipe = pipeline_time(ctx.micro_batches, plan.pp, plan.virtual_stages,
                                          slowest.work_s);
  Prediction p;
  p.kind = "prediction";
  p.plan_label = plan.label();
  StepTimeParts& parts = p.parts;
  parts.forward_s = m * slowest.compute_forward_s;
  parts.backward_s = m * slowest.compute_backward_s;
  parts.recompute_s = m * slowest.recompute_s;
  parts.tp_comm_s = m * slowest.tp_s;
  parts.pp_comm_s = m * slowest.p2p_s;
  parts.dp_comm_s = m * slowest.zero3_s + last.tail.dp_exposed_s;
  parts.offload_s = m * slowest.offload_s + last.tail.offload_exposed_s;
  parts.optimizer_s = last.tail.optimizer_s;
  parts.bubble_s = pipe.bubble_s;
  p.step_time_s = pipe.total_s() + last.tail_s();

  const double tokens = static_cast<double>(train.global_batch * model.seq_len);
  p.tokens_per_s = tokens / p.step_time_s;
  const double model_flops_per_s_per_gpu = megatron_model_flops(model, train.global_batch) /
                                           p.step_time_s /
                                           static_cast<double>(plan.world_size());
  p.tflops_per_gpu = model_flops_per_s_per_gpu / units::kTera;
  p.mfu = model_flops_without_recompute(model, train.global_batch) / p.step_time_s /
          static_cast<double>(plan.world_size()) / ctx.rates.peak_flops;
  p.bubble_fraction = parts.bubble_s / p.step_time_s;

  // The offload bytes the offload times above are priced from (offload_traffic), per link the
  // most any pipeline rank moves, as the executor reports its worst rank: equal to
  // offload_transfer_bytes for fp32 training, compute-precision parameters and gradients
  // otherwise. Empty (not written to JSON) without offload.
  if (!(plan.offload == OffloadPlan{})) {
    for (std::int64_t r = 0; r < plan.pp; ++r) {
      const TransferBytes t =
          offload_traffic(model, plan, train, r, ctx.rates.element_bytes).total();
      p.transfers.device_to_host = std::max(p.transfers.device_to_host, t.device_to_host);
      p.transfers.host_to_device = std::max(p.transfers.host_to_device, t.host_to_device);
      p.transfers.host_to_nvme = std::max(p.transfers.host_to_nvme, t.host_to_nvme);
      p.transfers.nvme_to_host = std::max(p.transfers.nvme_to_host, t.nvme_to_host);
    }
  }

  fill_prediction_memory(estimate_memory(model, cluster, train, plan, memory_options(options)),
                         plan, p);
  return p;
}

Prediction predict(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                   const Plan& plan, const Profile* profile) {
  return predict(model, cluster, train, plan, profile, CostModelOptions{});
}

}  // namespace strata
