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

#include "cost_model/specs/errors.h"
#include "cost_model/memory/memory_model.h"
#include "cost_model/specs/partition.h"
#include "cost_model/program/program.h"
#include "cost_model/memory/program_memory.h"
#include "cost_model/program/rank_program_cache.h"
#include "cost_model/program/steady_cut.h"
#include "cost_model/specs/units.h"

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

// ---- the executor's peak: its Program walked op by op (program_memory.h) ----------------
// The byte sizes of what strata's executor allocates on pipeline rank r (executor/engine,
// executor/model), for the walk. Units: the flat buffers of rank_unit_layouts, padded to a
// multiple of d; each kind of state's elements, width and tier from model_state_bytes.h,
// which the engine allocates by. The CPU backend computes in the train spec's width (the
// CPU predictions are pinned to it); CUDA in bf16 (backend_facts.h), with its own
// allocation pattern (cuda_op_allocations.h): LayerNorm backward scratch, bf16 logits over
// the aligned wte shard, each unit's fp32 staging at set-up, the forward's transients.
// The terms of the activations, the same on every rank of a plan (a layer's, the head's, a
// message's): made once per plan, not per rank walked (they were a tenth of a plan search).
// The per-unit vectors and the rank's state are executor_terms' below.
ExecutorMemoryTerms executor_activation_terms(const ModelSpec& model, const Plan& plan,
                                              ActivationConvention convention, int cb) {
  const double c = cb;
  const bool cuda = convention == ActivationConvention::kCudaExecutor;
  const bool sp = sequence_parallel_on(plan.sequence_parallel, plan.tp);
  ExecutorMemoryTerms t;
  const std::int64_t rows = (sp ? model.seq_len / plan.tp : model.seq_len) * plan.micro_batch;
  const double tokens = static_cast<double>(model.seq_len * plan.micro_batch);
  t.message = static_cast<double>(rows * model.hidden) * c;
  t.tokens = tokens * 4;  // int32 ids
  const auto layer = layer_activation_tensors(model, plan.micro_batch, plan.tp, sp, convention, cb);
  t.layer_saved = sum_bytes(apply_recompute(layer, plan.recompute)) - t.message;  // less ln1_in
  t.layer_backward_peak =
      layer_backward_peak_bytes(model, plan.micro_batch, plan.tp, sp, convention, cb);
  t.head_saved =
      sum_bytes(head_activation_tensors(model, plan.micro_batch, plan.tp, sp, convention, cb)) -
      t.message;  // less lnf_in
  t.layer_forward_extra = layer_forward_extra_bytes(model, plan.micro_batch, plan.tp, sp,
                                                    convention, cb, plan.recompute);
  if (cuda) {
    t.head_working = cuda_head_working_bytes(model, plan.micro_batch, plan.tp, sp);
    t.head_backward_working = cuda_norm_backward_scratch_bytes(model, rows, model.hidden);
  } else {
    t.head_working = sum_bytes(head_working_tensors(model, plan.micro_batch, plan.tp, sp, cb));
  }
  t.embedding_working = sp ? tokens * static_cast<double>(model.hidden) * c : 0;
  return t;
}

// executor_activation_terms' `activations` with rank's units and state (the state's device
// bytes added to `stage`).
ExecutorMemoryTerms executor_terms(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                                   const RankProgram& rank,
                                   ActivationConvention convention, int cb,
                                   const ExecutorMemoryTerms& activations, StageMemory& stage) {
  constexpr double kF = 4;  // fp32 bytes
  const bool cuda = convention == ActivationConvention::kCudaExecutor;
  const double c = cb;
  const std::int64_t d = plan.dp;
  const int z = plan.zero_stage;
  const bool grads_off = z >= 2 && plan.offload.gradients != OffloadTier::kNone;
  const bool optimizer_off = plan.offload.optimizer != OffloadTier::kNone;
  ExecutorMemoryTerms t = activations;
  double largest_shard = 0;
  double placed = 0;  // set-up: the device state of the units placed so far
  for (const ProgramUnit& u : rank.units) {
    const UnitState state = unit_state(u.params, d, z, plan.offload, cb);
    const double full = static_cast<double>(state.padded);
    const double shard = static_cast<double>(state.shard);
    const auto on_device = [](const StatePart& p) { return p.tier == OffloadTier::kNone ? p.total() : 0.0; };
    stage.params.device += on_device(state.params) + on_device(state.master);
    stage.gradients.device += on_device(state.gradients);
    stage.optimizer.device += kMoments * on_device(state.moments);
    if (cuda) {
      // ModelState::place: the unit's params, then its fp32 values staged beside them for
      // the cast (freed before the unit's gradients and moments are placed).
      const double params = on_device(state.params);
      if (params > 0) t.setup_peak = std::max(t.setup_peak, placed + params + state.params.elements * kF);
      placed += state.bytes_on(OffloadTier::kNone);
      // The offloaded state where the engine keeps it (the CPU's host and NVMe figures stay
      // the closed form's, pinned).
      const auto off_device = [](const StatePart& p) { return p.tier == OffloadTier::kNone ? 0.0 : p.total(); };
      add_to_tier(stage.params, state.params.tier, off_device(state.params));
      add_to_tier(stage.params, state.master.tier, off_device(state.master));
      add_to_tier(stage.gradients, state.gradients.tier, off_device(state.gradients));
      add_to_tier(stage.optimizer, state.moments.tier, kMoments * off_device(state.moments));
    }
    t.unit_grads.push_back(full * kF);
    t.unit_shard.push_back(shard * kF);
    t.unit_gather.push_back(full * c);
    t.unit_fetch.push_back(shard * kF);
    largest_shard = std::max(largest_shard, shard);
  }
  t.persistent = stage.params.device + stage.gradients.device + stage.optimizer.device;
  t.transient_grads = z >= 2;
  t.offloaded_grads = grads_off;
  bool last = false;
  for (const ProgramUnit& u : rank.units) last = last || u.kind == UnitKind::kFinalNorm;
  const double tokens = static_cast<double>(model.seq_len * plan.micro_batch);
  if (last) t.losses = (static_cast<double>(plan.micro_batches(train)) + 1) * tokens * kF;
  // The tail: ZeRO-1/2's all-gather copies this rank's slice (dp_scratch); offloaded
  // gradients come up for an optimizer on the device.
  if (z == 1 || z == 2) t.optimizer_working = largest_shard * c;
  if (grads_off && !optimizer_off) t.optimizer_working = largest_shard * kF;
  return t;
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
  Plan plan;
  plan.tp = tp;
  plan.pp = pp;
  plan.virtual_stages = virtual_stages;
  return stage_params(model, plan, pp_rank);
}

StageParams stage_params(const ModelSpec& model, const Plan& plan, std::int64_t pp_rank) {
  const std::int64_t tp = plan.tp;
  const std::int64_t pp = plan.pp;
  require_positive("pp", pp);
  require_positive("virtual_stages", plan.virtual_stages);
  if (pp_rank < 0 || pp_rank >= pp) {
    throw InfeasiblePlan(fmt::format("memory model: pp_rank = {}, expected 0..{}", pp_rank, pp - 1));
  }
  if (const std::string why = pipeline_violation(model, plan); model.layers < 1 || !why.empty()) {
    throw InfeasiblePlan(fmt::format("memory model: {}", why.empty() ? "no layers" : why));
  }
  std::int64_t stage_layers = 0;
  for (std::int64_t c = 0; c < plan.virtual_stages; ++c) stage_layers += chunk_layers(model, plan, pp_rank, c).layers;
  StageParams out;
  const std::int64_t per_layer = layer_params_per_tp_rank(model, tp);
  out.layers = stage_layers;
  out.layer_params = out.layers * per_layer;
  out.largest_unit = per_layer;
  if (pp_rank == 0) out.embedding_params += embedding_params_per_tp_rank(model, tp);
  if (pp_rank == pp - 1) {
    out.final_norm_params = final_norm_params(model);
    out.embedding_params += last_stage_vocab_params(model, tp, pp);
  }
  out.largest_unit = std::max(out.largest_unit, out.embedding_params);
  out.largest_module = std::max(largest_layer_module_params(model, tp), out.embedding_params);
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

namespace {

// ---- estimate_memory's parts --------------------------------------------------------------

// The plan's terms that are the same on every stage (a layer's activations, a micro-batch's
// edges, a message, the bytes per parameter), computed once per estimate.
struct PlanMemoryTerms {
  std::int64_t micro_batches = 0;  // m
  int compute_bytes = 0;           // the train spec's width
  double full_layer_bytes = 0;
  double kept_layer_bytes = 0;     // after recomputation drops its tensors
  // During a layer's backward under recomputation its dropped tensors are rebuilt: one
  // layer's worth is live on top of the stored ones.
  double recompute_working = 0;
  double embedding_bytes = 0;
  double head_bytes = 0;
  double logits_bytes = 0;
  double message_bytes = 0;
  ModelStateBytesPerParam per_param;
  double workspace = 0;
  // strata's executor is predicted by walking its Program (program_memory.h), on either
  // backend; the published convention keeps the closed forms.
  bool executor_peak = false;
  bool cuda_walk = false;
  // The byte width the executor computes in: the CPU backend the train spec's (its
  // predictions are pinned to it), CUDA bf16.
  int executor_cb = 0;
  ActivationConvention convention = ActivationConvention::kPublished;
  ExecutorMemoryTerms activation_terms;
};

PlanMemoryTerms plan_memory_terms(const ModelSpec& model, const ClusterSpec& cluster,
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
  PlanMemoryTerms t;
  t.micro_batches = train.global_batch / (plan.dp * plan.micro_batch);
  const int c = train.compute_bytes();
  t.compute_bytes = c;
  t.convention = options.published_activations ? ActivationConvention::kPublished
                                               : activation_convention(cluster.backend);
  const auto full_layer = layer_activation_tensors(model, plan.micro_batch, plan.tp,
                                                   plan.sequence_parallel, t.convention, c);
  t.full_layer_bytes = sum_bytes(full_layer);
  t.kept_layer_bytes = sum_bytes(apply_recompute(full_layer, plan.recompute));
  t.recompute_working = t.full_layer_bytes - t.kept_layer_bytes;
  t.embedding_bytes = sum_bytes(embedding_activation_tensors(
      model, plan.micro_batch, plan.tp, plan.sequence_parallel, t.convention, c));
  t.head_bytes = sum_bytes(head_activation_tensors(
      model, plan.micro_batch, plan.tp, plan.sequence_parallel, t.convention, c));
  t.logits_bytes = sum_bytes(logits_tensors(model, plan.micro_batch, plan.tp, c));
  t.message_bytes = static_cast<double>(
      (plan.sequence_parallel ? model.seq_len / plan.tp : model.seq_len) * plan.micro_batch *
      model.hidden * c);
  t.per_param = zero_model_state_bytes_per_param(plan.zero_stage, plan.dp, train.precision);
  t.workspace = device_workspace_bytes(options, cluster.backend);
  t.executor_peak = t.convention != ActivationConvention::kPublished;
  t.cuda_walk = t.convention == ActivationConvention::kCudaExecutor;
  t.executor_cb = t.cuda_walk ? backend_compute_bytes(Backend::kCuda) : train.compute_bytes();
  if (t.executor_peak) {
    t.activation_terms = executor_activation_terms(model, plan, t.convention, t.executor_cb);
  }
  return t;
}

// The ranks estimated (MemoryModelOptions::every_rank says why these hold the worst).
std::vector<bool> estimated_ranks(const Plan& plan, std::int64_t m,
                                  const MemoryModelOptions& options) {
  const std::int64_t p = plan.pp;
  const std::int64_t v = plan.virtual_stages;
  std::vector<bool> estimated(static_cast<std::size_t>(p), options.every_rank);
  if (!options.every_rank) {
    estimated.front() = estimated.back() = true;
    if (p > 2) {
      const std::int64_t second = in_flight_chunks(plan.schedule, p, v, m, 1);
      std::int64_t last_alike = 1;
      while (last_alike + 1 < p - 1 &&
             in_flight_chunks(plan.schedule, p, v, m, last_alike + 1) == second) {
        ++last_alike;
      }
      estimated[1] = estimated[static_cast<std::size_t>(last_alike)] = true;
    }
  }
  return estimated;
}

// Pipeline rank r by the closed forms: model state in its tiers, the in-flight micro-batches'
// activations, the buffers.
StageMemory closed_form_stage(const ModelSpec& model, const Plan& plan, std::int64_t r,
                              const PlanMemoryTerms& t, const MemoryModelOptions& options) {
  const std::int64_t p = plan.pp;
  const std::int64_t v = plan.virtual_stages;
  const std::int64_t m = t.micro_batches;
  StageMemory stage;
  stage.pp_rank = r;
  stage.stage_params = stage_params(model, plan, r);
  const double n_params = static_cast<double>(stage.stage_params.total());

  add_to_tier(stage.params, plan.offload.params, n_params * t.per_param.params);
  add_to_tier(stage.gradients, plan.offload.gradients, n_params * t.per_param.gradients);
  add_to_tier(stage.optimizer, plan.offload.optimizer, n_params * t.per_param.optimizer);

  // Activations.
  stage.in_flight = in_flight_chunks(plan.schedule, p, v, m, r);
  stage.layer_activation_bytes = t.kept_layer_bytes;
  stage.recompute_working_bytes = t.recompute_working;
  // Each in-flight micro-batch holds one chunk's layers: the rank's largest chunk (with
  // uneven stages the first and last virtual stage are shorter than the others).
  std::int64_t chunk_layers_max = 0;
  for (std::int64_t c = 0; c < v; ++c) {
    chunk_layers_max = std::max(chunk_layers_max, chunk_layers(model, plan, r, c).layers);
  }
  const double layers_bytes =
      t.kept_layer_bytes * static_cast<double>(chunk_layers_max * stage.in_flight);
  // Micro-batches of the first chunk (embedding) / last chunk (head) among the in-flight
  // forwards at the rank's peak.
  double edge_bytes = 0;
  if (r == 0) {
    edge_bytes += t.embedding_bytes *
                  static_cast<double>(std::min(forwards_of_chunk(stage.in_flight, p, v, 0), m));
  }
  if (r == p - 1) {
    edge_bytes += t.head_bytes * static_cast<double>(
                                     std::min(forwards_of_chunk(stage.in_flight, p, v, v - 1), m));
    stage.logits_bytes = t.logits_bytes;
  }
  stage.embedding_head_bytes = edge_bytes;
  // A layer's recomputed tensors live during its backward, the logits during the head's
  // forward and backward: never at once, so the larger of the two.
  stage.activations.device =
      layers_bytes + edge_bytes + std::max(t.recompute_working, stage.logits_bytes);

  // Buffers (device).
  if (plan.dp > 1) {
    const std::int64_t bucket =
        std::min<std::int64_t>(options.grad_bucket_elements, stage.stage_params.total());
    stage.grad_bucket_bytes = static_cast<double>(bucket) * t.compute_bytes;
  }
  if (plan.zero_stage == 3 && (plan.dp > 1 || plan.offload.params != OffloadTier::kNone)) {
    // ZeRO-3 all-gathers (or, with parameters offloaded, fetches) one unit (a layer or
    // the embedding) while the next is prefetched: the device's parameter working set.
    const std::int64_t unit = options.zero3_module_gathers ? stage.stage_params.largest_module
                                                            : stage.stage_params.largest_unit;
    stage.zero3_gather_bytes = 2.0 * static_cast<double>(unit) * t.compute_bytes;
  }
  stage.pipeline_buffer_bytes =
      static_cast<double>(pipeline_messages(plan.schedule, p, v, r)) * t.message_bytes;
  stage.workspace_bytes = t.workspace;
  stage.buffers.device = stage.grad_bucket_bytes + stage.zero3_gather_bytes +
                         stage.pipeline_buffer_bytes + stage.workspace_bytes;

  stage.total = stage.params + stage.gradients + stage.optimizer + stage.activations +
                stage.buffers;
  return stage;
}

// Replaces the closed forms' device terms of `stage` by the peak of the executor's Program
// walked op by op (program_memory.h).
void walk_executor_peak(StageMemory& stage, const ModelSpec& model, const ClusterSpec& cluster,
                        const TrainSpec& train, const Plan& plan, const PlanMemoryTerms& t,
                        const MemoryModelOptions& options) {
  const std::int64_t r = stage.pp_rank;
  const ProgramOptions program_options =
      options.program ? *options.program : executor_program_options(cluster.backend);
  // The walk of a shorter steady phase, the same peak (steady_cut.h); the terms (the
  // losses) from the real micro-batch count.
  const SteadyCut cut =
      options.walk_cuts_steady_phase
          ? steady_cut(plan.schedule, plan.pp, plan.virtual_stages, t.micro_batches, r)
          : SteadyCut{t.micro_batches, 0, -1};
  TrainSpec walked_train = train;
  walked_train.global_batch = cut.micro_batches * plan.dp * plan.micro_batch;
  RankProgram made;
  const RankProgram& program =
      options.programs != nullptr
          ? options.programs->get(model, walked_train, plan, r, program_options)
          : (made = make_rank_program(model, walked_train, plan, r, program_options));
  StageMemory walked = stage;
  walked.params.device = walked.gradients.device = walked.optimizer.device = 0;
  if (t.cuda_walk) walked.params = walked.gradients = walked.optimizer = TierBytes{};
  const ExecutorMemoryTerms terms = executor_terms(model, train, plan, program, t.convention,
                                                   t.executor_cb, t.activation_terms, walked);
  const ProgramMemoryPeak peak =
      walk_program_memory(program, terms,
                          WalkOptions{options.walk_reuses_passes, cut.shift, cut.from_pass});
  stage.params = walked.params;
  stage.gradients = walked.gradients;
  stage.gradients.device += peak.step_gradients_at_peak;
  stage.optimizer = walked.optimizer;
  stage.activations.device = peak.activations_at_peak;
  stage.step_gradient_bytes = peak.step_gradients_at_peak;
  stage.grad_bucket_bytes = 0;  // gradients are reduced in place
  stage.pipeline_buffer_bytes = 0;
  stage.zero3_gather_bytes = 0;  // in the walk's activations
  // CUDA: the cuBLASLt workspace and the bias-gradient scratch are outside the pool the
  // walk prices (kernels/cuda/cuda_resources.h); the CPU backend has none.
  stage.buffers.device = stage.workspace_bytes;
  stage.peak_moment = peak.peak_at;
  stage.total = stage.params + stage.gradients + stage.optimizer + stage.activations + stage.buffers;
  stage.total.device = peak.peak_bytes + stage.workspace_bytes;
}

}  // namespace

MemoryEstimate estimate_memory(const ModelSpec& model, const ClusterSpec& cluster,
                               const TrainSpec& train, const Plan& plan) {
  return estimate_memory(model, cluster, train, plan, MemoryModelOptions{});
}

MemoryEstimate estimate_memory(const ModelSpec& model, const ClusterSpec& cluster,
                               const TrainSpec& train, const Plan& plan,
                               const MemoryModelOptions& options) {
  const PlanMemoryTerms terms = plan_memory_terms(model, cluster, train, plan, options);
  MemoryEstimate estimate;
  estimate.stages.reserve(static_cast<std::size_t>(plan.pp));
  const std::vector<bool> estimated = estimated_ranks(plan, terms.micro_batches, options);
  for (std::int64_t r = 0; r < plan.pp; ++r) {
    if (!estimated[static_cast<std::size_t>(r)]) continue;
    StageMemory stage = closed_form_stage(model, plan, r, terms, options);
    if (terms.executor_peak) walk_executor_peak(stage, model, cluster, train, plan, terms, options);
    if (options.headroom.any()) {
      stage.headroom_bytes = device_headroom_bytes(stage.total.device, plan, options.headroom);
      stage.buffers.device += stage.headroom_bytes;
      stage.total.device += stage.headroom_bytes;
    }
    if (stage.total.device > estimate.worst.device) estimate.worst_pp_rank = r;
    estimate.worst.device = std::max(estimate.worst.device, stage.total.device);
    estimate.worst.host = std::max(estimate.worst.host, stage.total.host);
    estimate.worst.nvme = std::max(estimate.worst.nvme, stage.total.nvme);
    estimate.stages.push_back(std::move(stage));
  }
  return estimate;
}

double device_workspace_bytes(const MemoryModelOptions& options, Backend backend) {
  if (options.workspace_bytes >= 0) return options.workspace_bytes;
  return backend_facts(backend).workspace_bytes;
}

double device_headroom_bytes(double device_bytes, const Plan& plan,
                             const DeviceHeadroom& headroom) {
  // One communicator per parallel dimension the rank talks over (the pipeline's sends and
  // receives share one, as NCCL's point-to-point calls do).
  const double communicators = (plan.tp > 1 ? 1.0 : 0.0) + (plan.dp > 1 ? 1.0 : 0.0) +
                               (plan.pp > 1 ? 1.0 : 0.0);
  return device_bytes * headroom.fragmentation_fraction + headroom.context_bytes +
         communicators * headroom.communicator_bytes;
}

void fill_prediction_memory(const MemoryEstimate& estimate, const Plan& plan,
                            StepReport& report) {
  report.memory_bytes = estimate.worst;
  report.per_rank.clear();
  report.per_rank.reserve(estimate.stages.size());
  for (const auto& stage : estimate.stages) {
    RankMemory rank;
    rank.rank = world_rank_of({0, 0, static_cast<int>(stage.pp_rank)}, parallel_dims(plan));
    rank.pp_rank = stage.pp_rank;
    rank.peak_bytes = stage.total;
    report.per_rank.push_back(rank);
  }
}

}  // namespace strata
