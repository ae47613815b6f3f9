// predict() and stage_op_times(): the plan's Program priced op by op (op_costs.h) and
// replayed (program_simulator.h); the memory model fills the Prediction's memory.
//
// Two ways to the same replay. Without a cache: make_program, every rank priced on its own.
// With a PredictionCache (the planner): the pipeline skeleton of the shape, built once, and
// the plan's distinct ranks only, taken from the Program of a pipeline of min(p, 3) ranks
// with the same chunks (each chunk L/(p v) layers, the same v) and the fewest micro-batches
// a schedule allows. Its rank 0 has the ops of the real rank 0, its last rank those of rank
// p - 1, and its middle rank those of every middle rank: a rank's ops depend on its chunks'
// layer counts and on whether it holds virtual stage 0 or the last one (partition.h), never
// on which layers they are, and a body never depends on m. Both ways feed the same
// PricedRanks into the same replay, so the results are bitwise equal (tested).
#include "cost_model/pricing/cost_model.h"
#include "cost_model/checks/measured_path.h"

#include <algorithm>

#include <fmt/format.h>

#include "cost_model/pricing/inter_node_share.h"
#include "cost_model/memory/memory_floor.h"
#include "cost_model/memory/memory_model.h"
#include "cost_model/pricing/op_costs.h"
#include "cost_model/specs/partition.h"
#include "cost_model/checks/program_check.h"
#include "cost_model/checks/program_graph.h"
#include "cost_model/memory/stage_memory_kinds.h"
#include "cost_model/pricing/time_model.h"
#include "cost_model/specs/units.h"

namespace strata {
namespace {

MemoryModelOptions memory_options(const ClusterSpec& cluster, const Profile* profile,
                                  const CostModelOptions& options) {
  const KernelConventions conventions = conventions_for(cluster, profile, options);
  MemoryModelOptions memory;
  memory.program = predicted_program_options(cluster, profile, options);
  memory.published_activations = conventions.activations == ActivationAccounting::kPublished;
  memory.zero3_module_gathers = conventions.zero3_module_gathers;
  memory.headroom = device_headroom_for(cluster, profile).headroom;
  return memory;
}

// The plan's distinct ranks (see the file comment) and which of them each rank is.
RankClasses make_rank_classes(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                              const ProgramOptions& options) {
  const std::int64_t p = plan.pp;
  const std::int64_t small_p = std::min<std::int64_t>(p, 3);
  ModelSpec small_model = model;
  // The layers of the ranks kept: the first, one middle (every middle rank holds the same)
  // and the last, so that the small plan's split gives each its own count.
  small_model.layers = 0;
  for (std::int64_t k = 0; k < small_p; ++k) {
    const std::int64_t r = k == small_p - 1 ? p - 1 : k;  // 0, (1,) p - 1
    for (std::int64_t c = 0; c < plan.virtual_stages; ++c) {
      small_model.layers += chunk_layers(model, plan, r, c).layers;
    }
  }
  Plan small_plan = plan;
  small_plan.pp = small_p;
  // The fewest micro-batches: 1, or p for the interleaved schedule (m % p == 0).
  const std::int64_t small_m = plan.schedule == ScheduleKind::kInterleaved ? small_p : 1;
  TrainSpec small_train = train;
  small_train.global_batch = small_m * plan.dp * plan.micro_batch;
  RankClasses classes;
  Program small = make_program(small_model, small_train, small_plan, options);
  classes.deadlock = deadlock_fault(small);
  classes.programs = std::move(small.ranks);
  for (std::int64_t r = 0; r < p; ++r) {
    classes.class_of.push_back(static_cast<std::int32_t>(r == 0 ? 0 : (r == p - 1 ? small_p - 1 : 1)));
  }
  return classes;
}

enum class Replay { kParts, kStepTime, kBound };

// The replay of `plan` through the cache: its step figures (parts when asked), or only a
// lower bound of its step time.
StepSimulation simulate_cached(const ModelSpec& model, const ClusterSpec& cluster,
                               const TrainSpec& train, const Plan& plan, const Profile* profile,
                               const CostModelOptions& options, PredictionCache& cache,
                               Replay what) {
  const TimeContext ctx =
      make_time_context(model, cluster, train, plan, profile, layer_kernels(conventions_for(cluster, profile, options)),
                        options.node_ranks);
  const TimeModelCosts costs(ctx);
  const SimulationMode mode = simulation_mode(cluster.backend);
  const RankClasses& classes = cache.rank_classes(model, train, plan, predicted_program_options(cluster, profile, options));
  std::vector<PricedRank> priced;
  priced.reserve(classes.programs.size());
  for (const RankProgram& rank : classes.programs) priced.push_back(price_rank(rank, costs, mode));
  StepSimulation sim;
  if (what == Replay::kBound) {
    sim.pipeline_s = pipeline_lower_bound(ctx.micro_batches, priced, classes.class_of, mode);
  } else {
    const PipelineSkeleton& skeleton =
        cache.skeleton(plan.schedule, plan.pp, plan.virtual_stages, ctx.micro_batches);
    cache.check_deadlock_free(plan.schedule, plan.pp, plan.virtual_stages, ctx.micro_batches,
                              classes);
    if (what == Replay::kParts) return simulate_step(skeleton, priced, classes.class_of, mode);
    // The step time alone: simulate_step's pipeline_s + the longest tail, the same doubles.
    sim.pipeline_s = cache.pipeline_end(skeleton, priced, classes.class_of, mode);
  }
  double tail = 0;
  for (std::int32_t c : classes.class_of) tail = std::max(tail, priced[static_cast<std::size_t>(c)].tail_s);
  sim.step_s = sim.pipeline_s + tail;
  return sim;
}

void fill_time(const StepSimulation& sim, Prediction& p) {
  p.step_time_s = sim.step_s;
  p.parts = sim.parts;
  p.bubble_fraction = sim.parts.bubble_s / sim.step_s;
  if (sim.busy_s.size() > 1) {
    p.pipeline_idle = PipelineIdle::split(sim.busy_s, sim.critical_rank, sim.parts.bubble_s);
  }
}

Prediction predict_with(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                        const Plan& plan, const Profile* profile, const CostModelOptions& options,
                        PredictionCache* cache) {
  plan.check(model, cluster, train);
  Prediction p = predict_memory(model, cluster, train, plan, profile, options);
  if (cache != nullptr) {
    fill_time(simulate_cached(model, cluster, train, plan, profile, options, *cache, Replay::kParts),
              p);
  } else {
    const TimeContext ctx =
        make_time_context(model, cluster, train, plan, profile, layer_kernels(conventions_for(cluster, profile, options)),
                        options.node_ranks);
    const TimeModelCosts costs(ctx);
    const SimulationMode mode = simulation_mode(cluster.backend);
    const Program program = make_program(model, train, plan, predicted_program_options(cluster, profile, options));
    check_deadlock_free(program);
    const PipelineSkeleton skeleton = pipeline_skeleton(program);
    std::vector<PricedRank> priced;
    std::vector<std::int32_t> class_of;
    priced.reserve(program.ranks.size());
    for (const RankProgram& rank : program.ranks) {
      class_of.push_back(static_cast<std::int32_t>(priced.size()));
      priced.push_back(price_rank(rank, costs, mode));
    }
    fill_time(simulate_step(skeleton, priced, class_of, mode), p);
  }
  p.inter_node_comm_s = inter_node_comm_s(p.parts, plan, cluster);
  fill_throughput(model, cluster, train, plan, profile, p);
  return p;
}

}  // namespace

KernelConventions conventions_for(const ClusterSpec& cluster, const Profile* profile,
                                  const CostModelOptions& options) {
  if (options.conventions) return *options.conventions;
  if (profile != nullptr && profile->conventions) return *profile->conventions;
  return executor_conventions(cluster.backend);
}

HeadroomChoice device_headroom_for(const ClusterSpec& cluster, const Profile* profile) {
  if (profile != nullptr && profile->headroom.any()) return {profile->headroom, "the profile's"};
  // A file's block is read whole, "source" required (device_headroom.h): one that reserves
  // nothing on purpose says so there.
  if (cluster.headroom.any() || !cluster.headroom.source.empty()) {
    return {cluster.headroom, "the cluster file's"};
  }
  const BackendFacts& backend = backend_facts(cluster.backend);
  return {backend.default_headroom, fmt::format("the {} backend's default", backend.name)};
}

bool predicts_strata_executor(const Profile* profile, const CostModelOptions& options) {
  return !options.conventions && (profile == nullptr || !profile->conventions);
}

ProgramOptions predicted_program_options(const ClusterSpec& cluster, const Profile* profile,
                                         const CostModelOptions& options) {
  return program_options(backend_facts(cluster.backend), conventions_for(cluster, profile, options),
                         options.prefetch_depth);
}

const PipelineSkeleton& PredictionCache::skeleton(ScheduleKind kind, std::int64_t pp,
                                                  std::int64_t v, std::int64_t m) {
  const std::array<std::int64_t, 4> key{static_cast<std::int64_t>(kind), pp, v, m};
  auto it = skeletons_.find(key);
  if (it == skeletons_.end()) {
    it = skeletons_.emplace(key, pipeline_skeleton(kind, pp, v, m)).first;
    skeleton_faults_[key] = deadlock_fault(skeleton_program(it->second));
  }
  return it->second;
}

void PredictionCache::check_deadlock_free(ScheduleKind kind, std::int64_t pp, std::int64_t v,
                                          std::int64_t m, const RankClasses& classes) {
  const std::string& shape = skeleton_faults_.at({static_cast<std::int64_t>(kind), pp, v, m});
  if (!shape.empty()) throw ProgramDeadlock(shape);
  if (!classes.deadlock.empty()) throw ProgramDeadlock(classes.deadlock);
}

const RankClasses& PredictionCache::rank_classes(const ModelSpec& model, const TrainSpec& train,
                                                 const Plan& plan, const ProgramOptions& options) {
  // Everything make_rank_classes' Programs depend on (not d, b or m: the micro-batches of
  // the small pipeline are the fewest its schedule allows).
  const std::vector<std::int64_t> key{
      model.layers, model.hidden, model.heads, model.seq_len, model.vocab, model.ffn_hidden,
      plan.tp, plan.pp, plan.virtual_stages, static_cast<std::int64_t>(plan.schedule),
      plan.zero_stage, static_cast<std::int64_t>(plan.offload.optimizer),
      static_cast<std::int64_t>(plan.offload.gradients),
      static_cast<std::int64_t>(plan.offload.params), static_cast<std::int64_t>(plan.recompute),
      plan.sequence_parallel ? 1 : 0, options.prefetch_distance, options.recompute_regathers ? 1 : 0,
      options.vocab_row_alignment, static_cast<std::int64_t>(options.message_dtype),
      plan.first_stage_layers, plan.last_stage_layers, plan.embedding_counts_as_layer ? 1 : 0,
      plan.loss_counts_as_layer ? 1 : 0,
      // The family: unit sizes and the untied output unit.
      model.kv_head_count(), model.tied_output ? 1 : 0, model.biases ? 1 : 0,
      static_cast<std::int64_t>(model.norm), static_cast<std::int64_t>(model.mlp),
      static_cast<std::int64_t>(model.position)};
  auto it = classes_.find(key);
  if (it == classes_.end()) {
    it = classes_.emplace(key, make_rank_classes(model, train, plan, options)).first;
  }
  return it->second;
}

double PredictionCache::pipeline_end(const PipelineSkeleton& skeleton,
                                     const std::vector<PricedRank>& ranks,
                                     const std::vector<std::int32_t>& class_of,
                                     SimulationMode mode) {
  const std::array<std::int64_t, 4> shape{static_cast<std::int64_t>(skeleton.kind), skeleton.pp,
                                          skeleton.virtual_stages, skeleton.micro_batches};
  std::string key(reinterpret_cast<const char*>(shape.data()), sizeof(shape));
  key.append(reinterpret_cast<const char*>(class_of.data()), class_of.size() * sizeof(std::int32_t));
  key += replay_key(ranks, mode);
  const auto it = ends_.find(key);
  if (it != ends_.end()) {
    ++replay_hits_;
    return it->second;
  }
  ++replays_;
  const double end = replay_pipeline(skeleton, ranks, class_of, mode, scratch_);
  ends_.emplace(std::move(key), end);
  return end;
}

void fill_throughput(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                     const Plan& plan, const Profile* profile, Prediction& p) {
  const double tokens = static_cast<double>(train.global_batch * model.seq_len);
  const double gpus = static_cast<double>(plan.world_size());
  p.tokens_per_s = tokens / p.step_time_s;
  p.tflops_per_gpu = hardware_flops(model, train.global_batch, plan.recompute) / p.step_time_s /
                     gpus / units::kTera;
  p.model_tflops_per_gpu = model_flops_without_recompute(model, train.global_batch) /
                           p.step_time_s / gpus / units::kTera;
  device_rates(cluster, train, nullptr);  // checks the cluster's peak and bandwidth
  const double peak = mfu_peak_flops(
      cluster, train, profile,
      mfu_cores_per_rank(cluster, plan_ranks_per_node(plan, cluster),
                         profile_threads_per_rank(profile)));
  p.mfu = model_flops_without_recompute(model, train.global_batch) / p.step_time_s / gpus / peak;
}

Prediction predict_memory(const ModelSpec& model, const ClusterSpec& cluster,
                          const TrainSpec& train, const Plan& plan, const Profile* profile,
                          const CostModelOptions& options, MemoryRanks ranks,
                          RankProgramCache* programs) {
  Prediction p;
  p.kind = "prediction";
  p.plan_label = plan.label();
  // The offload bytes the offload ops are priced from, per link the most any pipeline rank
  // moves, as the executor reports its worst rank: offload_transfer_bytes for fp32 training,
  // compute-precision parameters and gradients otherwise. Empty without offload.
  if (!(plan.offload == OffloadPlan{})) {
    const double element_bytes = device_rates(cluster, train, nullptr).element_bytes;
    // The first, a middle and the last rank: the middle ranks move the same bytes.
    for (const std::int64_t r : {std::int64_t{0}, std::min<std::int64_t>(1, plan.pp - 1), plan.pp - 1}) {
      const TransferBytes t = offload_traffic(model, plan, train, r, element_bytes);
      p.transfers.device_to_host = std::max(p.transfers.device_to_host, t.device_to_host);
      p.transfers.host_to_device = std::max(p.transfers.host_to_device, t.host_to_device);
      p.transfers.host_to_nvme = std::max(p.transfers.host_to_nvme, t.host_to_nvme);
      p.transfers.nvme_to_host = std::max(p.transfers.nvme_to_host, t.nvme_to_host);
    }
  }
  MemoryModelOptions memory =
      memory_options(cluster, profile, options);
  memory.every_rank = ranks == MemoryRanks::kEvery;
  memory.programs = programs;
  const MemoryEstimate estimate = estimate_memory(model, cluster, train, plan, memory);
  fill_prediction_memory(estimate, plan, p);
  fill_prediction_memory_kinds(estimate, p);
  return p;
}

double predict_device_memory_floor(const ModelSpec& model, const ClusterSpec& cluster,
                                   const TrainSpec& train, const Plan& plan,
                                   const Profile* profile, const CostModelOptions& options) {
  return device_memory_floor(model, cluster, train, plan,
                             memory_options(cluster, profile, options));
}

double predict_step_time(const ModelSpec& model, const ClusterSpec& cluster,
                         const TrainSpec& train, const Plan& plan, const Profile* profile,
                         const CostModelOptions& options, PredictionCache& cache) {
  return simulate_cached(model, cluster, train, plan, profile, options, cache, Replay::kStepTime)
      .step_s;
}

double predict_step_time_bound(const ModelSpec& model, const ClusterSpec& cluster,
                               const TrainSpec& train, const Plan& plan, const Profile* profile,
                               const CostModelOptions& options, PredictionCache& cache) {
  return simulate_cached(model, cluster, train, plan, profile, options, cache, Replay::kBound)
      .step_s;
}

TrainSpec priced_train(const TrainSpec& train) {
  TrainSpec priced;
  priced.global_batch = train.global_batch;
  priced.precision = train.precision;
  priced.optimizer.name = train.optimizer.name;
  return priced;
}

Prediction predict(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                   const Plan& plan, const Profile* profile, const CostModelOptions& options) {
  return predict_with(model, cluster, train, plan, profile, options, nullptr);
}

Prediction predict(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                   const Plan& plan, const Profile* profile, const CostModelOptions& options,
                   PredictionCache& cache) {
  return predict_with(model, cluster, train, plan, profile, options, &cache);
}

Prediction predict(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                   const Plan& plan, const Profile* profile) {
  return predict(model, cluster, train, plan, profile, CostModelOptions{});
}

namespace {

// The plan's Program priced rank by rank, as predict() replays it: what the predicted and the
// measured critical paths walk.
struct PricedProgram {
  Program program;
  SimulationMode mode = SimulationMode::kStreams;
  std::vector<PricedRank> priced;  // [pp_rank]; points into `program`: not copied or moved
  std::vector<std::int32_t> class_of;
};

void price_program(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                   const Plan& plan, const Profile* profile, const CostModelOptions& options,
                   PricedProgram& out) {
  plan.check(model, cluster, train);
  const TimeContext ctx =
      make_time_context(model, cluster, train, plan, profile, layer_kernels(conventions_for(cluster, profile, options)),
                        options.node_ranks);
  const TimeModelCosts costs(ctx);
  out.mode = simulation_mode(cluster.backend);
  out.program = make_program(model, train, plan, predicted_program_options(cluster, profile, options));
  check_deadlock_free(out.program);
  for (const RankProgram& rank : out.program.ranks) {
    out.class_of.push_back(static_cast<std::int32_t>(out.priced.size()));
    out.priced.push_back(price_rank(rank, costs, out.mode));
  }
}

}  // namespace

StepCriticalPath step_critical_path(const ModelSpec& model, const ClusterSpec& cluster,
                                    const TrainSpec& train, const Plan& plan,
                                    const Profile* profile, const CostModelOptions& options,
                                    std::size_t off_path) {
  PricedProgram p;
  price_program(model, cluster, train, plan, profile, options, p);
  StepCriticalPath out;
  out.mode = p.mode;
  out.simulated_step_s =
      simulate_step(pipeline_skeleton(p.program), p.priced, p.class_of, p.mode, nullptr, false).step_s;
  out.path = critical_path(p.program, p.priced, p.mode, off_path);
  out.program = std::move(p.program);  // the path holds no pointer into it
  return out;
}

MeasuredPath step_measured_critical_path(const ModelSpec& model, const ClusterSpec& cluster,
                                         const TrainSpec& train, const Plan& plan,
                                         const Profile* profile,
                                         const std::vector<MeasuredOp>& measured,
                                         std::size_t off_path) {
  PricedProgram p;
  price_program(model, cluster, train, plan, profile, {}, p);
  return measured_critical_path(p.program, p.priced, p.mode, measured, off_path);
}

StageOpTimes stage_op_times(const ModelSpec& model, const ClusterSpec& cluster,
                            const TrainSpec& train, const Plan& plan, const Profile* profile,
                            const CostModelOptions& options) {
  plan.check(model, cluster, train);
  const TimeContext ctx =
      make_time_context(model, cluster, train, plan, profile, layer_kernels(conventions_for(cluster, profile, options)),
                        options.node_ranks);
  const TimeModelCosts costs(ctx);
  StageOpTimes times;
  times.mode = simulation_mode(cluster.backend);
  times.program = make_program(model, train, plan, predicted_program_options(cluster, profile, options));
  times.timeline = simulate_program(times.program, costs, times.mode);
  return times;
}

}  // namespace strata
