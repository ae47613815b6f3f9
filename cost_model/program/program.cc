// The Program generator (see program.h for what each op means and when it is issued).
#include "cost_model/program/program.h"

#include <algorithm>
#include <array>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/partition.h"
#include "cost_model/program/rank_pipeline_ops.h"

namespace strata {
namespace {

using Kind = ProgramOpKind;

// At most two indices (of units, or of the ops that move them): a step reads the
// parameters of one unit, or the head's two (the output layer and the final norm). Fixed
// size: a Program makes one per step and two per step of a ZeRO-3 pass, and vectors of them
// were a tenth of a plan search's time in the allocator.
class TwoIndices {
 public:
  TwoIndices() = default;
  TwoIndices(std::initializer_list<std::int32_t> indices) {
    for (std::int32_t i : indices) push_back(i);
  }
  void push_back(std::int32_t i) {
    if (size_ == kCapacity) throw std::logic_error("program: a step moves more than two units");
    at_[size_++] = i;
  }
  std::size_t size() const { return size_; }
  std::int32_t operator[](std::size_t k) const { return at_[k]; }
  const std::int32_t* begin() const { return at_.data(); }
  const std::int32_t* end() const { return at_.data() + size_; }

 private:
  static constexpr std::size_t kCapacity = 2;
  std::array<std::int32_t, kCapacity> at_{};
  std::size_t size_ = 0;
};

// One compute step of a pass before the state moves are placed around it.
struct Step {
  Part part = Part::kNone;
  std::int32_t unit = -1;
  TwoIndices needs;  // units whose parameters it reads (ZeRO-3 gathers them)
};

// What the plan asks of the state moves, decided once per rank.
struct MovePolicy {
  bool gathers = false;            // ZeRO-3
  bool fetches = false;            // ZeRO-3 with offloaded parameters
  bool grads_off = false;          // ZeRO >= 2 with offloaded gradients
  bool sequence_parallel = false;
  bool kv_sums = false;              // KV heads replicated over TP
  bool recompute_regathers = false;  // published: the recomputed forward gathers again
  int prefetch_distance = 2;
  // The host optimizer steps a layer (and the final norm) inside the last micro-batch's
  // backward, as soon as its gradient is reduced (and down): optimizer_in_backward().
  bool optimizer_in_backward = false;
  // Offloaded layer gradients go down after every micro-batch's backward (not with SP: the
  // LayerNorm sums come first, once per step).
  bool early_layer_offload() const { return grads_off && !sequence_parallel; }
};

class BodyBuilder {
 public:
  BodyBuilder(const MovePolicy& policy, PassBody& body) : policy_(policy), body_(body) {}

  std::int32_t emit(ProgramOp op) {
    body_.ops.push_back(op);
    return static_cast<std::int32_t>(body_.ops.size() - 1);
  }

  // The body of one pass over `steps` (in execution order).
  void build(const std::vector<Step>& steps) {
    const auto n = static_cast<std::int32_t>(steps.size());
    fetch_of_.assign(steps.size(), {});
    gather_of_.assign(steps.size(), {});
    if (policy_.fetches) {
      for (std::int32_t j = 0; j < std::min(n, policy_.prefetch_distance); ++j) fetch(steps, j);
    }
    if (policy_.gathers && n > 0) gather(steps, 0);
    for (std::int32_t i = 0; i < n; ++i) {
      if (policy_.fetches && i + policy_.prefetch_distance < n) {
        fetch(steps, i + policy_.prefetch_distance);
      }
      const Step& step = steps[static_cast<std::size_t>(i)];
      // The regather this step waits for is issued before the next step's prefetch: queued
      // behind it, the prefetch of a later layer would stand between a compute and its own
      // gather on the comm stream (three transfers before each layer's backward instead of
      // the previous reduction and the regather).
      if (!body_.forward && policy_.recompute_regathers && step.part == Part::kLayer) {
        regather_for_recompute(step, gather_of_[static_cast<std::size_t>(i)]);
      }
      if (policy_.gathers && i + 1 < n) gather(steps, i + 1);
      ProgramOp compute;
      compute.kind = Kind::kCompute;
      compute.stream = Stream::kCompute;
      compute.part = step.part;
      compute.unit = step.unit;
      for (std::int32_t g : gather_of_[static_cast<std::size_t>(i)]) compute.add_after(g);
      const std::int32_t c = emit(compute);
      if (policy_.gathers) {
        for (std::int32_t u : step.needs) emit(state_op(Kind::kRelease, Stream::kCompute, u));
      }
      if (!body_.forward) after_backward(step, c);
    }
  }

 private:
  static ProgramOp state_op(Kind kind, Stream stream, std::int32_t unit) {
    ProgramOp op;
    op.kind = kind;
    op.stream = stream;
    op.unit = unit;
    return op;
  }

  void fetch(const std::vector<Step>& steps, std::int32_t j) {
    for (std::int32_t u : steps[static_cast<std::size_t>(j)].needs) {
      fetch_of_[static_cast<std::size_t>(j)].push_back(emit(state_op(Kind::kFetch, Stream::kCopy, u)));
    }
  }

  void gather(const std::vector<Step>& steps, std::int32_t j) {
    const auto& needs = steps[static_cast<std::size_t>(j)].needs;
    for (std::size_t k = 0; k < needs.size(); ++k) {
      ProgramOp op = state_op(Kind::kGather, Stream::kComm, needs[k]);
      if (policy_.fetches) op.add_after(fetch_of_[static_cast<std::size_t>(j)][k]);
      gather_of_[static_cast<std::size_t>(j)].push_back(emit(op));
    }
  }

  // Published conventions: the recomputed forward is a pass of its own that gathers the
  // layer and releases it before the backward gathers it again (reusing the fetched shard).
  // Gathered on demand, right before the layer's compute: the layer's first gather was the
  // one prefetched a step ahead.
  void regather_for_recompute(const Step& step, TwoIndices& gathers) {
    if (!policy_.gathers) return;
    for (std::int32_t u : step.needs) {
      ProgramOp again = state_op(Kind::kGather, Stream::kComm, u);
      for (std::int32_t g : gathers) again.add_after(g);
      gathers = {emit(again)};
    }
  }

  void after_backward(const Step& step, std::int32_t compute) {
    const bool layer = step.part == Part::kLayer;
    const bool early = layer && policy_.early_layer_offload();
    const bool at_last = body_.reduces && (layer || step.part == Part::kHead);
    if (!early && !at_last) return;
    if (!early && policy_.sequence_parallel) {
      ProgramOp sum = state_op(Kind::kSumNormGrads, Stream::kComm, step.unit);
      sum.add_after(compute);
      emit(sum);
    }
    if (layer && policy_.kv_sums) {
      ProgramOp sum = state_op(Kind::kSumKvGrads, Stream::kComm, step.unit);
      sum.add_after(compute);
      emit(sum);
    }
    ProgramOp reduce = state_op(Kind::kReduceGrads, Stream::kComm, step.unit);
    reduce.add_after(compute);
    const std::int32_t r = emit(reduce);
    std::int32_t complete = r;  // where the unit's gradient for the optimizer is final
    if (policy_.grads_off) {
      ProgramOp down = state_op(Kind::kOffloadGrads, Stream::kCopy, step.unit);
      down.add_after(r);
      complete = emit(down);
    }
    if (at_last && policy_.optimizer_in_backward) {
      ProgramOp update = state_op(Kind::kOptimizerStep, Stream::kHost, step.unit);
      update.add_after(complete);
      emit(update);
    }
  }

  const MovePolicy& policy_;
  PassBody& body_;
  std::vector<TwoIndices> fetch_of_, gather_of_;  // [step] -> op indices
};

// The compute steps of a pass over local chunk `chunk`.
std::vector<Step> pass_steps(const ModelSpec& model, const Plan& plan, const RankProgram& rank,
                             std::int64_t chunk, bool forward) {
  const ChunkLayers cl = chunk_layers(model, plan, rank.pp_rank, chunk);
  const std::int32_t embedding = rank.unit_index("embedding");
  // The output layer the head reads: the untied one, else the (copy of the) token embedding.
  const std::int32_t output = rank.unit_index("output");
  const std::int32_t wte =
      output >= 0 ? output : (embedding >= 0 ? embedding : rank.unit_index("wte_copy"));
  const std::int32_t final_norm = rank.unit_index("final_norm");
  // A chunk's layers are consecutive units (partition.h's order): one scan for the first,
  // not a lookup by name per layer (a scan per layer made a pass of L layers cost L^2 string
  // compares; a table of names, a string and a hash per layer: most of a planner's Program).
  std::int32_t first_unit = -1;
  for (std::size_t i = 0; i < rank.units.size() && first_unit < 0; ++i) {
    const ProgramUnit& u = rank.units[i];
    if (u.kind == UnitKind::kLayer && u.layer == cl.first_layer) first_unit = static_cast<std::int32_t>(i);
  }
  const auto layer_step = [&](std::int64_t l) {
    const std::int64_t at = first_unit < 0 ? -1 : first_unit + (l - cl.first_layer);
    const bool found = at >= 0 && at < static_cast<std::int64_t>(rank.units.size()) &&
                       rank.units[static_cast<std::size_t>(at)].kind == UnitKind::kLayer &&
                       rank.units[static_cast<std::size_t>(at)].layer == l;
    const std::int32_t u = found ? static_cast<std::int32_t>(at) : -1;
    return Step{Part::kLayer, u, {u}};
  };
  std::vector<Step> steps;
  steps.reserve(static_cast<std::size_t>(cl.layers) + 2);
  if (forward) {
    if (cl.first) steps.push_back({Part::kEmbedding, embedding, {embedding}});
    for (std::int64_t l = cl.first_layer; l < cl.first_layer + cl.layers; ++l) steps.push_back(layer_step(l));
    // The head's forward also runs the logits' backward (the tied wte's gradient).
    if (cl.last) steps.push_back({Part::kHead, final_norm, {wte, final_norm}});
  } else {
    if (cl.last) steps.push_back({Part::kHead, final_norm, {final_norm}});
    for (std::int64_t l = cl.first_layer + cl.layers - 1; l >= cl.first_layer; --l) steps.push_back(layer_step(l));
    // The embedding's backward reads no parameters: it only accumulates wte and wpe grads.
    if (cl.first) steps.push_back({Part::kEmbedding, embedding, {}});
  }
  return steps;
}

// A dimension of a pipeline message as ProgramOp holds it (32-bit: see there).
std::int32_t message_extent(std::int64_t n, const char* what) {
  if (n <= 0 || n > std::numeric_limits<std::int32_t>::max()) {
    throw InfeasiblePlan(fmt::format("program: a pipeline message's {} {} is outside 1..{}", what, n,
                                     std::numeric_limits<std::int32_t>::max()));
  }
  return static_cast<std::int32_t>(n);
}

ProgramOp step_op(Kind kind, Stream stream, std::int32_t unit) {
  ProgramOp op;
  op.kind = kind;
  op.stream = stream;
  op.unit = unit;
  return op;
}

}  // namespace

ProgramOpKind program_kind(OpKind kind) {
  switch (kind) {
    case OpKind::kForward: return Kind::kForward;
    case OpKind::kBackward: return Kind::kBackward;
    case OpKind::kRecvForward: return Kind::kRecvForward;
    case OpKind::kSendForward: return Kind::kSendForward;
    case OpKind::kRecvBackward: return Kind::kRecvBackward;
    case OpKind::kSendBackward: return Kind::kSendBackward;
  }
  return Kind::kForward;
}

std::string to_string(Stream stream) {
  switch (stream) {
    case Stream::kCompute: return "compute";
    case Stream::kComm: return "comm";
    case Stream::kCopy: return "copy";
    case Stream::kP2p: return "p2p";
    case Stream::kHost: return "host";
  }
  return "unknown";
}

std::string to_string(ProgramOpKind kind) {
  switch (kind) {
    case Kind::kForward: return "forward";
    case Kind::kBackward: return "backward";
    case Kind::kRecvForward: return "recv_forward";
    case Kind::kSendForward: return "send_forward";
    case Kind::kRecvBackward: return "recv_backward";
    case Kind::kSendBackward: return "send_backward";
    case Kind::kCompute: return "compute";
    case Kind::kFetch: return "fetch";
    case Kind::kGather: return "gather";
    case Kind::kRelease: return "release";
    case Kind::kSumNormGrads: return "sum_norm_grads";
    case Kind::kSumKvGrads: return "sum_kv_grads";
    case Kind::kReduceGrads: return "reduce_grads";
    case Kind::kOffloadGrads: return "offload_grads";
    case Kind::kTiedEmbeddingSum: return "tied_embedding_sum";
    case Kind::kGradNorm: return "grad_norm";
    case Kind::kOptimizerStep: return "optimizer_step";
    case Kind::kGatherParams: return "gather_params";
  }
  return "unknown";
}

// The planner copies ProgramOps by the million (a 1T search on 3,072 GPUs in under 2 s):
// a field added here is paid for there.
static_assert(sizeof(ProgramOp) <= 52, "ProgramOp grew: measure tools/bench/planner_bench");

bool ProgramOp::is_message() const {
  return kind == Kind::kRecvForward || kind == Kind::kSendForward ||
         kind == Kind::kRecvBackward || kind == Kind::kSendBackward;
}

void ProgramOp::add_after(std::int32_t index) {
  for (auto& a : after) {
    if (a == index) return;
    if (a < 0) {
      a = index;
      return;
    }
  }
  throw std::logic_error(fmt::format("program: {} waits for more than {} ops", to_string(kind),
                                     kMaxAfter));
}

std::int32_t RankProgram::unit_index(const std::string& name) const {
  for (std::size_t i = 0; i < units.size(); ++i) {
    if (units[i].name == name) return static_cast<std::int32_t>(i);
  }
  return -1;
}

bool optimizer_in_backward(const Plan& plan, const TrainSpec& train, const ProgramOptions& options) {
  return options.host_optimizer_in_backward && plan.offload.optimizer != OffloadTier::kNone &&
         train.optimizer.grad_clip == 0.0;
}

namespace {

// The first op of the step that names each carried unit (program.h, "carried"): a body op of
// a pass (under ZeRO-3 with offloaded parameters every unit a pass uses is fetched in it).
std::vector<RankProgram::CarriedWait> carried_waits(const RankProgram& rank) {
  std::vector<RankProgram::CarriedWait> waits;
  for (std::size_t t = static_cast<std::size_t>(rank.carried_begin); t < rank.ops.size(); ++t) {
    const ProgramOp& update = rank.ops[t];
    if (update.kind != Kind::kOptimizerStep || update.stream != Stream::kHost) {
      throw std::logic_error("program: a carried " + to_string(update.kind) + " on the " +
                             to_string(update.stream) + " stream (only host optimizer steps are)");
    }
    RankProgram::CarriedWait wait;
    wait.unit = update.unit;
    for (std::int32_t i = 0; i < rank.tail_begin && wait.op < 0; ++i) {
      const ProgramOp& op = rank.ops[static_cast<std::size_t>(i)];
      if (!op.is_pass()) continue;
      const auto& body = rank.bodies[static_cast<std::size_t>(op.body)].ops;
      for (std::size_t j = 0; j < body.size(); ++j) {
        if (body[j].unit == update.unit) {
          wait.op = i;
          wait.body_op = static_cast<std::int32_t>(j);
          break;
        }
      }
    }
    if (wait.op < 0) {
      throw std::logic_error("program: no pass uses " +
                             rank.units[static_cast<std::size_t>(update.unit)].name +
                             ", whose update is carried");
    }
    waits.push_back(wait);
  }
  return waits;
}

}  // namespace

bool host_optimizer_carried(const Plan& plan, const TrainSpec& train, const ProgramOptions& options) {
  return options.host_steps_carried && !optimizer_in_backward(plan, train, options) &&
         plan.zero3_state_in_host_memory();
}

Plan program_plan(const Plan& plan, const ProgramOptions& options) {
  Plan read = plan;
  read.dp = 1;
  read.micro_batch = 1;
  const auto offloaded = [](OffloadTier t) { return t == OffloadTier::kNone ? t : OffloadTier::kCpu; };
  read.offload.params = plan.zero_stage == 3 ? offloaded(plan.offload.params) : OffloadTier::kNone;
  read.offload.gradients =
      plan.zero_stage >= 2 ? offloaded(plan.offload.gradients) : OffloadTier::kNone;
  read.offload.optimizer = offloaded(plan.offload.optimizer);
  if (plan.zero_stage == 2 && read.offload.gradients == OffloadTier::kNone) read.zero_stage = 1;
  const bool regathers = options.recompute_regathers && plan.recompute == Recompute::kFull;
  read.recompute = regathers ? Recompute::kFull : Recompute::kNone;
  return read;
}

RankProgram make_rank_program(const ModelSpec& model, const TrainSpec& train,
                              const Plan& given_plan, std::int64_t pp_rank,
                              const ProgramOptions& options, RankPipelineOpsCache* pipelines) {
  given_plan.check_against_model(model, train);
  const std::int64_t m = given_plan.micro_batches(train);
  // Built from what a Program reads alone, so that RankProgramCache's key is complete.
  const Plan plan = program_plan(given_plan, options);
  if (options.prefetch_distance < 1) {
    throw ConfigError(fmt::format("prefetch distance {}: expected >= 1", options.prefetch_distance));
  }
  if (pp_rank < 0 || pp_rank >= plan.pp) {
    throw InfeasiblePlan(fmt::format("program: pipeline rank {} is outside 0..{}", pp_rank, plan.pp - 1));
  }

  // The schedule's part, first: a schedule the plan cannot run throws before anything is built.
  const RankPipelineKey key{plan.schedule, plan.pp, plan.virtual_stages, m, pp_rank};
  std::vector<ProgramOp> made;
  const std::vector<ProgramOp>& schedule_ops =
      pipelines != nullptr ? pipelines->get(key) : (made = make_rank_pipeline_ops(key));

  RankProgram rank;
  rank.pp_rank = pp_rank;
  for (const UnitLayout& layout : rank_unit_layouts(model, plan, pp_rank, 0, options.vocab_row_alignment,
                                                         UnitSegments::kOmitted)) {
    ProgramUnit u;
    u.name = layout.name;
    u.kind = layout.kind;
    u.layer = layout.layer;
    u.chunk = static_cast<std::int32_t>(unit_chunk(model, plan, pp_rank, layout));
    u.params = layout.count;
    rank.units.push_back(std::move(u));
  }

  MovePolicy policy;
  policy.gathers = plan.zero_stage == 3;
  policy.fetches = policy.gathers && plan.offload.params != OffloadTier::kNone;
  policy.grads_off = plan.zero_stage >= 2 && plan.offload.gradients != OffloadTier::kNone;
  policy.sequence_parallel = plan.sequence_parallel;
  policy.kv_sums = kv_head_copies(model, plan.tp) > 1;
  policy.recompute_regathers = options.recompute_regathers && plan.recompute == Recompute::kFull;
  policy.prefetch_distance = options.prefetch_distance;
  policy.optimizer_in_backward = optimizer_in_backward(plan, train, options);

  // Bodies: per chunk one forward, one backward, and (when it differs) the reducing
  // backward of the last micro-batch.
  const std::int64_t v = plan.virtual_stages;
  std::vector<std::array<std::int32_t, 3>> body_of(static_cast<std::size_t>(v));
  for (std::int64_t c = 0; c < v; ++c) {
    const std::vector<Step> forward_steps = pass_steps(model, plan, rank, c, true);
    const std::vector<Step> backward_steps = pass_steps(model, plan, rank, c, false);
    for (int variant = 0; variant < 3; ++variant) {
      PassBody body;
      body.forward = variant == 0;
      body.chunk = static_cast<std::int32_t>(c);
      body.reduces = variant == 2;
      BodyBuilder(policy, body).build(body.forward ? forward_steps : backward_steps);
      const bool same_as_plain = variant == 2 && body.ops == rank.bodies.back().ops;
      if (same_as_plain) {
        body_of[static_cast<std::size_t>(c)][2] = body_of[static_cast<std::size_t>(c)][1];
        continue;
      }
      rank.bodies.push_back(std::move(body));
      body_of[static_cast<std::size_t>(c)][static_cast<std::size_t>(variant)] =
          static_cast<std::int32_t>(rank.bodies.size() - 1);
    }
  }

  // The pipeline: the schedule's ops, each pass naming this rank's body of its variant, each
  // message the token rows this TP rank holds between stages (1/t of them with sequence
  // parallelism) of one sequence, by hidden: what the engine's passes hand over. (The
  // schedule's ops are shared by every model; the shapes are this one's.)
  const std::int32_t message_rows =
      message_extent(model.seq_len / (plan.sequence_parallel ? plan.tp : 1), "rows per sequence");
  const std::int32_t message_width = message_extent(model.hidden, "width");
  rank.ops.reserve(schedule_ops.size() + 3 * rank.units.size() + 4);
  rank.ops = schedule_ops;
  for (ProgramOp& op : rank.ops) {
    if (op.is_pass()) {
      op.body = body_of[static_cast<std::size_t>(op.chunk)][static_cast<std::size_t>(op.body)];
    }
    if (op.is_message()) {
      op.message_dtype = options.message_dtype;
      op.message_rows = message_rows;
      op.message_width = message_width;
    }
  }

  // The tail (program.h, rule 3: it starts after the whole pipeline).
  rank.tail_begin = static_cast<std::int32_t>(rank.ops.size());
  const auto emit = [&rank](ProgramOp op) {
    rank.ops.push_back(op);
    return static_cast<std::int32_t>(rank.ops.size() - 1);
  };
  const std::int32_t embedding = rank.unit_index("embedding");
  const std::int32_t copy = rank.unit_index("wte_copy");
  if (model.tied_output && plan.pp > 1 && (embedding >= 0 || copy >= 0)) {
    emit(step_op(Kind::kTiedEmbeddingSum, Stream::kComm, embedding >= 0 ? embedding : copy));
  }
  // The vocabulary-sized units are reduced here, after the pipeline: the tied ones after
  // their sum; the untied output layer alike (its gradient is complete only then too).
  const std::int32_t output = rank.unit_index("output");
  std::int32_t last_down = -1;
  for (std::int32_t u : {embedding, copy, output}) {
    if (u < 0) continue;
    const std::int32_t r = emit(step_op(Kind::kReduceGrads, Stream::kComm, u));
    if (policy.grads_off) {
      ProgramOp down = step_op(Kind::kOffloadGrads, Stream::kCopy, u);
      down.add_after(r);
      last_down = emit(down);
    }
  }
  ProgramOp norm = step_op(Kind::kGradNorm, Stream::kComm, -1);
  if (last_down >= 0) norm.add_after(last_down);
  const std::int32_t norm_index = emit(norm);
  const Stream optimizer_stream =
      plan.offload.optimizer != OffloadTier::kNone ? Stream::kHost : Stream::kCompute;
  // The units a reducing backward body already stepped (optimizer_in_backward).
  std::vector<bool> stepped(rank.units.size(), false);
  for (const PassBody& body : rank.bodies) {
    for (const ProgramOp& op : body.ops) {
      if (op.kind == Kind::kOptimizerStep) stepped[static_cast<std::size_t>(op.unit)] = true;
    }
  }
  const bool carried = host_optimizer_carried(given_plan, train, options);
  const auto first_step = static_cast<std::int32_t>(rank.ops.size());
  for (std::size_t u = 0; u < rank.units.size(); ++u) {
    std::int32_t updated = -1;  // stepped in a body: done before the tail starts (rule 3)
    if (!stepped[u]) {
      ProgramOp update = step_op(Kind::kOptimizerStep, optimizer_stream, static_cast<std::int32_t>(u));
      update.add_after(norm_index);
      updated = emit(update);
    }
    if (plan.zero_stage == 1 || plan.zero_stage == 2) {
      ProgramOp gather = step_op(Kind::kGatherParams, Stream::kComm, static_cast<std::int32_t>(u));
      if (updated >= 0) gather.add_after(updated);
      emit(gather);
    }
  }
  rank.carried_begin = carried ? first_step : -1;
  if (carried) rank.carried_waits = carried_waits(rank);
  return rank;
}

Program make_program(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                     const ProgramOptions& options) {
  Program program;
  program.plan = plan;
  program.micro_batches = plan.micro_batches(train);
  program.options = options;
  for (std::int64_t r = 0; r < plan.pp; ++r) {
    program.ranks.push_back(make_rank_program(model, train, plan, r, options));
  }
  return program;
}

std::int64_t pipeline_message_tag(std::int64_t pp, std::int64_t virtual_stages,
                                  std::int64_t micro_batch, std::int64_t receiver_vstage,
                                  bool forward) {
  return (micro_batch * pp * virtual_stages + receiver_vstage) * 2 + (forward ? 0 : 1);
}

ProgramOptions program_options(const BackendFacts& backend, const KernelConventions& conventions,
                               int prefetch_depth) {
  ProgramOptions options;
  options.prefetch_distance = prefetch_depth;
  options.recompute_regathers = conventions.recompute_regathers;
  options.vocab_row_alignment = backend.vocab_row_alignment;
  options.message_dtype = backend.compute_dtype;
  options.host_optimizer_in_backward = backend.host_optimizer_in_backward;
  options.host_steps_carried = backend.host_steps_carried;
  return options;
}

ProgramOptions executor_program_options(Backend backend, int prefetch_depth) {
  return program_options(backend_facts(backend), executor_conventions(backend), prefetch_depth);
}

std::int64_t message_elements(const ProgramOp& op, std::int64_t micro_batch) {
  return micro_batch * op.message_rows * op.message_width;
}

std::string message_shape(const ProgramOp& op, std::int64_t micro_batch) {
  return fmt::format("({}, {}) {}", micro_batch * op.message_rows, op.message_width,
                     to_string(op.message_dtype));
}

std::int64_t max_in_flight(const RankProgram& rank) {
  std::int64_t held = 0, peak = 0;
  for (const ProgramOp& op : rank.ops) {
    if (op.kind == Kind::kForward) peak = std::max(peak, ++held);
    if (op.kind == Kind::kBackward) --held;
  }
  return peak;
}

namespace {

std::string describe_op(std::size_t index, const ProgramOp& op, const RankProgram& rank) {
  std::string s = fmt::format("{} {} [{}]", index, to_string(op.kind), to_string(op.stream));
  if (op.micro_batch >= 0) s += fmt::format(" mb={}", op.micro_batch);
  if (op.chunk >= 0) s += fmt::format(" chunk={}", op.chunk);
  if (op.peer >= 0) s += fmt::format(" peer={}", op.peer);
  if (op.is_message()) s += fmt::format(" per_sequence={}", message_shape(op, 1));
  if (op.unit >= 0) s += " " + rank.units[static_cast<std::size_t>(op.unit)].name;
  if (op.body >= 0) s += fmt::format(" body={}", op.body);
  std::string after;
  for (std::int32_t a : op.after) {
    // fmt, not operator+: GCC 12 warns (-Wstringop-overflow, a false positive) on the
    // concatenation once describe_op is inlined.
    if (a >= 0) after += fmt::format("{}{}", after.empty() ? "" : ",", a);
  }
  if (!after.empty()) s += fmt::format(" after=[{}]", after);
  if (op.forward_sends_complete > 0 || op.backward_sends_complete > 0) {
    s += fmt::format(" sends_complete=[{},{}]", op.forward_sends_complete, op.backward_sends_complete);
  }
  return s;
}

}  // namespace

std::string describe(const RankProgram& rank) {
  std::string out = fmt::format("pipeline rank {}\n", rank.pp_rank);
  for (std::size_t b = 0; b < rank.bodies.size(); ++b) {
    const PassBody& body = rank.bodies[b];
    out += fmt::format("body {}: {} chunk {}{}\n", b, body.forward ? "forward" : "backward",
                       body.chunk, body.reduces ? " (reduces)" : "");
    for (std::size_t i = 0; i < body.ops.size(); ++i) {
      out += "  " + describe_op(i, body.ops[i], rank) + "\n";
    }
  }
  for (std::size_t i = 0; i < rank.ops.size(); ++i) {
    if (static_cast<std::int32_t>(i) == rank.tail_begin) out += "tail:\n";
    if (static_cast<std::int32_t>(i) == rank.carried_begin) out += "carried into the next step:\n";
    out += describe_op(i, rank.ops[i], rank) + "\n";
  }
  for (const RankProgram::CarriedWait& w : rank.carried_waits) {
    out += fmt::format("next step: {} waits for its update at op {} body op {}\n",
                       rank.units[static_cast<std::size_t>(w.unit)].name, w.op, w.body_op);
  }
  return out;
}

}  // namespace strata
