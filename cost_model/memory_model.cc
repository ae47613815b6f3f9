// The memory model's per-stage estimate: model state under ZeRO and offload, the stage's
// share of parameters, in-flight micro-batches per schedule (closed forms, O(1)), buffers.
// Activation tensor lists are in activation_memory.cc. Cheap on purpose: the planner calls
// estimate_memory for thousands of candidates, so it is O(pp) per plan and never builds
// a schedule.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "cost_model/errors.h"
#include "cost_model/memory_model.h"
#include "cost_model/partition.h"
#include "cost_model/units.h"

namespace strata {
namespace {

void require_positive(const char* what, std::int64_t value) {
  if (value < 1) throw InfeasiblePlan(fmt::format("memory model: {} = {}, expected >= 1", what, value));
}

// Adds `bytes` to the tier an offload choice names.
void add_to_tier(TierBytes& tier_bytes, OffloadTier tier, double bytes) {
  switch (tier) {
    case OffloadTier::kNone: tier_bytes.device += bytes; break;
    case OffloadTier::kCpu: tier_bytes.host += bytes; break;
    case OffloadTier::kNvme: tier_bytes.nvme += bytes; break;
  }
}

TierBytes operator+(const TierBytes& x, const TierBytes& y) {
  return TierBytes{x.device + y.device, x.host + y.host, x.nvme + y.nvme};
}

// Forwards of chunk `chunk` among the first n forwards of a rank. Megatron's interleaved
// order runs forwards in groups of p micro-batches per chunk: chunk 0 (p of them), chunk 1,
// ..., chunk v-1, then chunk 0 again; with v == 1 every forward is chunk 0.
std::int64_t forwards_of_chunk(std::int64_t n, std::int64_t pp, std::int64_t v,
                               std::int64_t chunk) {
  if (v == 1) return n;
  const std::int64_t cycle = v * pp;
  const std::int64_t rem = n % cycle;
  return (n / cycle) * pp + std::clamp(rem - chunk * pp, std::int64_t{0}, pp);
}

// Pipeline messages (activation or gradient, s b h elements, / t with sequence parallel as
// Megatron's scatter/gather sends) a rank has buffers for at once: one receive and one send
// in each direction, except that the first rank neither receives activations nor sends
// gradients and the last rank neither sends activations nor receives gradients (unless
// interleaved, where every rank passes chunks on).
std::int64_t pipeline_messages(ScheduleKind kind, std::int64_t pp, std::int64_t v,
                               std::int64_t pp_rank) {
  if (pp == 1) return 0;
  const bool interleaved = kind == ScheduleKind::kInterleaved && v > 1;
  if (interleaved) return 4;
  return (pp_rank == 0 || pp_rank == pp - 1) ? 2 : 4;
}

// cuBLAS workspace NVIDIA recommends for Hopper (CUBLAS_WORKSPACE_CONFIG docs: 32 MiB), plus
// the 4 MiB scratch of the bias-gradient reduction (kernels/cuda/cuda_resources.h).
constexpr double kCudaWorkspaceBytes = (32 + 4) * units::kMiB;

// ---- the CPU executor's peak ------------------------------------------------------------
// What executor/engine allocates on pipeline rank r, moment by moment (fp32 everywhere).
// Units: the embedding (rank 0), the layers, the tied wte copy (rank p-1, p > 1), the final
// LayerNorm (rank p-1), each a flat buffer padded to a multiple of d. Persistent: params
// (ZeRO-3: the 1/d shard), gradients (ZeRO 0/1: full; 2/3: the shard) and AdamW's m, v
// (ZeRO >= 1: the shard). During the step, at ZeRO 2/3, a unit's full gradient buffer lives
// from its first gradient to the reduce-scatter after the last backward. Saved activations
// per in-flight (micro-batch, chunk); sends complete at the step's end, so every message
// sent so far is live. The peak is the largest of these moments:
//   backward  a layer's backward (its working set, its recomputed tensors, ZeRO-3's current
//             and prefetched layer) at the first backward (j = 0: every in-flight activation,
//             only the first gradient buffers) and at the last steady-state one (j = F - K:
//             still K in flight, every forward sent; GPipe: j = 1);
//   head      the last rank's head forward at the same two moments;
//   optimizer persistent state plus every ZeRO-2/3 full gradient buffer (or ZeRO-1/2's
//             all-gather scratch, one shard).
struct CpuExecutorTerms {
  double kept_layer = 0;       // saved bytes per layer per micro-batch (after recompute)
  double recompute = 0;        // one layer's recomputed tensors during its backward
  double head_saved = 0;       // head tensors per in-flight last-chunk micro-batch
  double backward_working = 0; // layer_backward_working_bytes
  double head_working = 0;     // head_working_tensors
  double message = 0;          // one pipeline message (this rank's token rows)
};

std::int64_t padded(std::int64_t n, std::int64_t d) { return (n + d - 1) / d * d; }

void cpu_executor_peak(const ModelSpec& model, const Plan& plan, std::int64_t m,
                       const CpuExecutorTerms& t, StageMemory& stage) {
  constexpr double kF = 4;  // fp32 bytes
  const std::int64_t p = plan.pp, v = plan.virtual_stages, d = plan.dp, r = stage.pp_rank;
  const int z = plan.zero_stage;
  const bool first = r == 0, last = r == p - 1;
  const double layer = static_cast<double>(padded(layer_params_per_tp_rank(model, plan.tp), d));
  const double embedding =
      first ? static_cast<double>(padded(embedding_params_per_tp_rank(model, plan.tp), d)) : 0;
  const double tied =
      (last && p > 1) ? static_cast<double>(padded(tied_copy_params_per_tp_rank(model, plan.tp), d)) : 0;
  const double final_norm = last ? static_cast<double>(padded(final_norm_params(model), d)) : 0;
  const std::int64_t layers_per_chunk = model.layers / (p * v);
  const double layers = static_cast<double>(layers_per_chunk * v);
  const double full = layers * layer + embedding + tied + final_norm;  // padded elements
  const double wte_unit = last ? (p > 1 ? tied : embedding) : 0;

  stage.params.device = kF * (z >= 3 ? full / d : full);
  const double persistent_grads = kF * (z >= 2 ? full / d : full);
  stage.optimizer.device = 2 * kF * (z >= 1 ? full / d : full);
  const double persistent = stage.params.device + persistent_grads + stage.optimizer.device;

  const std::int64_t F = m * v;
  const std::int64_t K = stage.in_flight;
  const auto fwd_of = [&](std::int64_t n, std::int64_t c) { return forwards_of_chunk(n, p, v, c); };
  // Backwards run the chunks in reverse order (the last chunk's group first).
  const auto bwd_of = [&](std::int64_t n, std::int64_t c) { return forwards_of_chunk(n, p, v, v - 1 - c); };
  std::vector<std::int64_t> moments{0};
  const std::int64_t j1 = plan.schedule == ScheduleKind::kGpipe ? 1 : F - K;
  if (j1 > 0 && j1 < F) moments.push_back(j1);

  double best = -1;
  const auto consider = [&](const char* moment, double acts, double working, double step_grads,
                            double buffers, double head_bytes) {
    const double total = persistent + acts + working + step_grads + buffers;
    if (total <= best) return;
    best = total;
    stage.peak_moment = moment;
    stage.activations.device = acts + working;
    stage.working_bytes = working;
    stage.step_gradient_bytes = step_grads;
    stage.gradients.device = persistent_grads + step_grads;
    stage.buffers.device = buffers;
    stage.embedding_head_bytes = head_bytes;
  };
  for (const std::int64_t j : moments) {
    const std::int64_t forwards = plan.schedule == ScheduleKind::kGpipe ? F : std::min(K + j, F);
    const std::int64_t in_flight = forwards - j;
    const std::int64_t head_in_flight = last ? fwd_of(forwards, v - 1) - bwd_of(j, v - 1) : 0;
    const double head_bytes = static_cast<double>(head_in_flight) * t.head_saved;
    const double acts =
        static_cast<double>(in_flight * layers_per_chunk) * t.kept_layer + head_bytes;
    std::int64_t messages = 0;
    for (std::int64_t c = 0; c < v; ++c) {
      const std::int64_t vstage = c * p + r;
      if (vstage != p * v - 1) messages += fwd_of(forwards, c);
      if (vstage != 0) messages += bwd_of(j, c);
    }
    const double sends = static_cast<double>(messages) * t.message;
    // ZeRO-2/3 full gradient buffers allocated by this moment (padded elements).
    double touched = wte_unit;
    if (j == 0) {
      touched += final_norm + layer;  // the head's, and the first layer's backward
    } else {
      touched += final_norm;
      for (std::int64_t c = 0; c < v; ++c) {
        if (bwd_of(j + 1, c) >= 1) touched += static_cast<double>(layers_per_chunk) * layer;
      }
      if (first && p > 1 && bwd_of(j, 0) >= 1) touched += embedding;
    }
    const double step_grads = z >= 2 ? kF * touched : 0;
    const double gathered = z >= 3 ? kF * (layers_per_chunk >= 2 ? 2 : 1) * layer : 0;
    consider("backward", acts, t.backward_working + t.recompute, step_grads, sends + gathered,
             head_bytes);
    if (last) {
      const double head_grads = z >= 2 ? kF * (j == 0 ? wte_unit : touched - layer) : 0;
      const double head_gathered = z >= 3 ? kF * (wte_unit + final_norm) : 0;
      consider("head", acts, t.head_working, head_grads, sends + head_gathered, head_bytes);
    }
  }
  double largest_unit = std::max({layer, embedding, tied, final_norm});
  const double end_extra = z >= 2 ? kF * full : (z == 1 ? kF * largest_unit / d : 0);
  consider("optimizer", 0, 0, z >= 2 ? end_extra : 0, z == 1 ? end_extra : 0, 0);
  stage.total.device = best;
}

}  // namespace

ModelStateBytesPerParam zero_model_state_bytes_per_param(int zero_stage, std::int64_t dp,
                                                         Precision precision) {
  if (zero_stage < 0 || zero_stage > 3) {
    throw InfeasiblePlan(fmt::format("memory model: zero_stage = {}, expected 0..3", zero_stage));
  }
  require_positive("dp", dp);
  // Rajbhandari et al. 2020, section 3.1 / Figure 1: mixed-precision Adam keeps 2 (bf16
  // params) + 2 (bf16 grads) + K = 12 (fp32 params, momentum, variance) bytes per
  // parameter. fp32 training has no separate master copy: 4 + 4 + 8.
  const bool bf16 = precision == Precision::kBf16;
  const double params = bf16 ? 2 : 4;
  const double gradients = bf16 ? 2 : 4;
  const double optimizer = bf16 ? 12 : 8;
  const double d = static_cast<double>(dp);
  return ModelStateBytesPerParam{
      zero_stage >= 3 ? params / d : params,
      zero_stage >= 2 ? gradients / d : gradients,
      zero_stage >= 1 ? optimizer / d : optimizer,
  };
}

StageParams stage_params(const ModelSpec& model, std::int64_t tp, std::int64_t pp,
                         std::int64_t virtual_stages, std::int64_t pp_rank) {
  require_positive("pp", pp);
  require_positive("virtual_stages", virtual_stages);
  if (pp_rank < 0 || pp_rank >= pp) {
    throw InfeasiblePlan(fmt::format("memory model: pp_rank = {}, expected 0..{}", pp_rank, pp - 1));
  }
  if (model.layers < 1 || model.layers % (pp * virtual_stages) != 0) {
    throw InfeasiblePlan(fmt::format(
        "memory model: layers % (pp * v) = {} % ({} * {}) != 0", model.layers, pp, virtual_stages));
  }
  StageParams out;
  const std::int64_t per_layer = layer_params_per_tp_rank(model, tp);
  out.layers = model.layers / pp;
  out.layer_params = out.layers * per_layer;
  out.largest_unit = per_layer;
  if (pp_rank == 0) out.embedding_params += embedding_params_per_tp_rank(model, tp);
  if (pp_rank == pp - 1) {
    out.final_norm_params = final_norm_params(model);
    // The output layer is the token embedding (tied); with p > 1 the last stage holds its
    // own copy (Megatron keeps them equal by all-reducing their gradients).
    if (pp > 1) out.embedding_params += tied_copy_params_per_tp_rank(model, tp);
  }
  out.largest_unit = std::max(out.largest_unit, out.embedding_params);
  return out;
}

std::int64_t in_flight_chunks(ScheduleKind kind, std::int64_t pp, std::int64_t v,
                              std::int64_t m, std::int64_t pp_rank) {
  require_positive("pp", pp);
  require_positive("virtual_stages", v);
  require_positive("micro_batches", m);
  if (pp_rank < 0 || pp_rank >= pp) {
    throw InfeasiblePlan(fmt::format("memory model: pp_rank = {}, expected 0..{}", pp_rank, pp - 1));
  }
  switch (kind) {
    case ScheduleKind::kGpipe:
      // Huang et al. 2019: all forwards, then all backwards.
      return m * v;
    case ScheduleKind::kInterleaved:
      if (v > 1) {
        // Narayanan et al. 2021 / Megatron's interleaved schedule: warm-up forwards
        // 2 (p - r - 1) + (v - 1) p, then one more forward before the first backward.
        return std::min(2 * (pp - pp_rank - 1) + (v - 1) * pp + 1, m * v);
      }
      [[fallthrough]];
    case ScheduleKind::kOneFOneB:
      // PipeDream-Flush: rank r runs p - r - 1 warm-up forwards plus one.
      return std::min(pp - pp_rank, m);
  }
  return m * v;  // unreachable: every enumerator returns above
}

MemoryEstimate estimate_memory(const ModelSpec& model, const ClusterSpec& cluster,
                               const TrainSpec& train, const Plan& plan) {
  return estimate_memory(model, cluster, train, plan, MemoryModelOptions{});
}

MemoryEstimate estimate_memory(const ModelSpec& model, const ClusterSpec& cluster,
                               const TrainSpec& train, const Plan& plan,
                               const MemoryModelOptions& options) {
  require_positive("tp", plan.tp);
  require_positive("pp", plan.pp);
  require_positive("dp", plan.dp);
  require_positive("virtual_stages", plan.virtual_stages);
  require_positive("micro_batch", plan.micro_batch);
  require_positive("global_batch", train.global_batch);
  if (train.global_batch % (plan.dp * plan.micro_batch) != 0) {
    throw InfeasiblePlan(fmt::format(
        "memory model: global_batch % (dp * micro_batch) = {} % ({} * {}) != 0",
        train.global_batch, plan.dp, plan.micro_batch));
  }
  const std::int64_t m = train.global_batch / (plan.dp * plan.micro_batch);
  const std::int64_t p = plan.pp;
  const std::int64_t v = plan.virtual_stages;
  const std::int64_t layers_per_chunk = model.layers / (p * v);  // checked by stage_params
  const int c = train.compute_bytes();
  const ActivationConvention convention = options.published_activations
                                              ? ActivationConvention::kPublished
                                              : activation_convention(cluster.backend);

  // Per-layer and per-micro-batch terms: the same on every stage, computed once.
  const auto full_layer = layer_activation_tensors(model, plan.micro_batch, plan.tp,
                                                   plan.sequence_parallel, convention, c);
  const double full_layer_bytes = sum_bytes(full_layer);
  const double kept_layer_bytes = sum_bytes(apply_recompute(full_layer, plan.recompute));
  // During a layer's backward under recomputation its dropped tensors are rebuilt: one
  // layer's worth is live on top of the stored ones.
  const double recompute_working = full_layer_bytes - kept_layer_bytes;
  const double embedding_bytes = sum_bytes(embedding_activation_tensors(
      model, plan.micro_batch, plan.tp, plan.sequence_parallel, convention, c));
  const double head_bytes = sum_bytes(head_activation_tensors(
      model, plan.micro_batch, plan.tp, plan.sequence_parallel, convention, c));
  const double logits_bytes = sum_bytes(logits_tensors(model, plan.micro_batch, plan.tp, c));
  const double message_bytes = static_cast<double>(
      (plan.sequence_parallel ? model.seq_len / plan.tp : model.seq_len) * plan.micro_batch *
      model.hidden * c);

  const ModelStateBytesPerParam per_param =
      zero_model_state_bytes_per_param(plan.zero_stage, plan.dp, train.precision);
  const double workspace = options.workspace_bytes >= 0
                               ? options.workspace_bytes
                               : (cluster.backend == Backend::kCuda ? kCudaWorkspaceBytes : 0.0);

  const bool executor_peak =
      convention == ActivationConvention::kCpuExecutor && plan.offload == OffloadPlan{};
  CpuExecutorTerms cpu_terms;
  if (executor_peak) {
    const bool sp = plan.sequence_parallel && plan.tp > 1;
    cpu_terms.kept_layer = kept_layer_bytes;
    cpu_terms.recompute = recompute_working;
    cpu_terms.head_saved = head_bytes;
    cpu_terms.backward_working =
        layer_backward_working_bytes(model, plan.micro_batch, plan.tp, sp, c);
    cpu_terms.head_working =
        sum_bytes(head_working_tensors(model, plan.micro_batch, plan.tp, sp, c));
    cpu_terms.message = message_bytes;
  }

  MemoryEstimate estimate;
  estimate.stages.reserve(static_cast<std::size_t>(p));
  for (std::int64_t r = 0; r < p; ++r) {
    StageMemory stage;
    stage.pp_rank = r;
    stage.stage_params = stage_params(model, plan.tp, p, v, r);
    const double n_params = static_cast<double>(stage.stage_params.total());

    add_to_tier(stage.params, plan.offload.params, n_params * per_param.params);
    add_to_tier(stage.gradients, plan.offload.gradients, n_params * per_param.gradients);
    add_to_tier(stage.optimizer, plan.offload.optimizer, n_params * per_param.optimizer);

    // Activations.
    stage.in_flight = in_flight_chunks(plan.schedule, p, v, m, r);
    stage.layer_activation_bytes = kept_layer_bytes;
    stage.recompute_working_bytes = recompute_working;
    const double layers_bytes =
        kept_layer_bytes * static_cast<double>(layers_per_chunk * stage.in_flight);
    // Micro-batches of the first chunk (embedding) / last chunk (head) among the in-flight
    // forwards at the rank's peak.
    double edge_bytes = 0;
    if (r == 0) {
      edge_bytes += embedding_bytes *
                    static_cast<double>(std::min(forwards_of_chunk(stage.in_flight, p, v, 0), m));
    }
    if (r == p - 1) {
      edge_bytes += head_bytes * static_cast<double>(
                                     std::min(forwards_of_chunk(stage.in_flight, p, v, v - 1), m));
      stage.logits_bytes = logits_bytes;
    }
    stage.embedding_head_bytes = edge_bytes;
    stage.activations.device = layers_bytes + recompute_working + edge_bytes + stage.logits_bytes;

    // Buffers (device).
    if (plan.dp > 1) {
      const std::int64_t bucket =
          std::min<std::int64_t>(options.grad_bucket_elements, stage.stage_params.total());
      stage.grad_bucket_bytes = static_cast<double>(bucket) * c;
    }
    if (plan.zero_stage == 3 && (plan.dp > 1 || plan.offload.params != OffloadTier::kNone)) {
      // ZeRO-3 all-gathers (or, with parameters offloaded, fetches) one unit (a layer or
      // the embedding) while the next is prefetched: the device's parameter working set.
      stage.zero3_gather_bytes = 2.0 * static_cast<double>(stage.stage_params.largest_unit) * c;
    }
    stage.pipeline_buffer_bytes =
        static_cast<double>(pipeline_messages(plan.schedule, p, v, r)) * message_bytes;
    stage.workspace_bytes = workspace;
    stage.buffers.device = stage.grad_bucket_bytes + stage.zero3_gather_bytes +
                           stage.pipeline_buffer_bytes + stage.workspace_bytes;

    stage.total = stage.params + stage.gradients + stage.optimizer + stage.activations +
                  stage.buffers;
    if (executor_peak) {
      // Replaces the conservative sum's device terms by the executor's peak moment.
      stage.grad_bucket_bytes = 0;  // gradients are reduced in place
      stage.pipeline_buffer_bytes = 0;
      cpu_executor_peak(model, plan, m, cpu_terms, stage);
    }

    if (stage.total.device > estimate.worst.device) estimate.worst_pp_rank = r;
    estimate.worst.device = std::max(estimate.worst.device, stage.total.device);
    estimate.worst.host = std::max(estimate.worst.host, stage.total.host);
    estimate.worst.nvme = std::max(estimate.worst.nvme, stage.total.nvme);
    estimate.stages.push_back(std::move(stage));
  }
  return estimate;
}

void fill_prediction_memory(const MemoryEstimate& estimate, const Plan& plan,
                            StepReport& report) {
  report.memory_bytes = estimate.worst;
  report.per_rank.clear();
  report.per_rank.reserve(estimate.stages.size());
  for (const auto& stage : estimate.stages) {
    report.per_rank.push_back(
        RankMemory{world_rank_of({0, 0, static_cast<int>(stage.pp_rank)}, parallel_dims(plan)),
                   stage.pp_rank, stage.total});
  }
}

}  // namespace strata
