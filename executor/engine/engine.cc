// Replays one pipeline rank's schedule over the GPT model (see engine.h).
//
// How a step's time is split (this rank's view; the report picks the slowest rank):
//   forward_s / backward_s  forward / backward ops minus the TP and ZeRO-3 collectives inside
//   tp_comm_s   TP all-reduces (layers, embedding, vocab-parallel loss)
//   dp_comm_s   tied-embedding sum, gradient all-reduce / reduce-scatter, parameter gathers
//   pp_comm_s   posting sends and completing them at the end of the step
//   bubble_s    blocked in pipeline receives (waiting for the neighbouring stage)
//   optimizer_s grad norm and AdamW;  other_s the rest (loss reduction, bookkeeping).
#include "executor/engine/engine.h"

#include <fmt/format.h>

#include <chrono>
#include <stdexcept>

#include "cost_model/errors.h"
#include "cost_model/partition.h"
#include "kernels/cpu/elementwise.h"

namespace strata::engine {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
constexpr int kMaxTag = 32767;  // the MPI standard's smallest allowed MPI_TAG_UB

}  // namespace

std::vector<UnitLayout> rank_layouts(const ModelSpec& model, const Plan& plan,
                                     const RankCoords& coords) {
  return rank_unit_layouts(model, plan, coords.pp, coords.tp);
}

Engine::Engine(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
               const ProcessGroups& groups, Communicator& world, AccountingAllocator& alloc,
               const data::BatchSampler& sampler, const OffloadOptions& offload_options)
    : model_(model),
      train_(train),
      plan_(plan),
      groups_(&groups),
      world_(&world),
      alloc_(&alloc),
      sampler_(&sampler),
      dims_(model::make_dims(model, plan.micro_batch, plan.tp, groups.coords().tp,
                             plan.sequence_parallel)),
      tp_(groups.tp()),
      schedule_(make_schedule(plan.schedule, plan.pp, plan.virtual_stages, plan.micro_batches(train))),
      state_(rank_layouts(model, plan, groups.coords()), plan.zero_stage, groups, train.seed, alloc,
             plan.offload, offload_options, plan.micro_batches(train), plan.sequence_parallel) {
  const std::int64_t stages = plan.pp * plan.virtual_stages;
  const std::int64_t per_stage = model.layers / stages;
  for (std::int64_t c = 0; c < plan.virtual_stages; ++c) {
    ChunkInfo info;
    info.vstage = schedule_.virtual_stage(groups.coords().pp, c);
    info.first_layer = info.vstage * per_stage;
    info.layers = per_stage;
    info.first = info.vstage == 0;
    info.last = info.vstage == stages - 1;
    chunks_.push_back(info);
  }
  if ((schedule_.micro_batches * stages) * 2 > kMaxTag) {
    throw InfeasiblePlan(fmt::format(
        "executor: {} micro-batches x {} virtual stages need more pipeline message tags than "
        "MPI guarantees ({})", schedule_.micro_batches, stages, kMaxTag));
  }
  const double tokens = static_cast<double>(train.global_batch) * static_cast<double>(model.seq_len);
  global_tokens_ = tokens;
  loss_scale_ = static_cast<float>(1.0 / tokens);
}

std::string Engine::wte_unit() const {
  return state_.has("embedding") ? "embedding" : "wte_copy";
}

int Engine::tag(std::int64_t mb, std::int64_t receiver_vstage, int direction) const {
  return static_cast<int>((mb * schedule_.num_virtual_stages() + receiver_vstage) * 2 + direction);
}

void Engine::forward(std::int64_t step, std::int64_t mb, std::int64_t chunk) {
  const ChunkInfo& info = chunks_[static_cast<std::size_t>(chunk)];
  Saved& s = saved_[{mb, chunk}];
  const std::int64_t n = dims_.act_local();
  const std::int64_t tokens = static_cast<std::int64_t>(dims_.BT());
  std::vector<std::int32_t> targets;
  if (info.first || info.last) {
    std::vector<std::int32_t> inputs(static_cast<std::size_t>(tokens));
    targets.resize(static_cast<std::size_t>(tokens));
    sampler_->micro_batch(step, train_.global_batch, plan_.dp, groups_->coords().dp, mb,
                          plan_.micro_batch, inputs.data(), targets.data());
    if (info.first) s.tokens = std::move(inputs);
  }
  if (info.first) {
    Buffer x = alloc_->allocate_floats(MemoryTier::kDevice, n, "act/ln1_in");
    const float* emb = state_.acquire("embedding");
    const auto& unit = state_.unit("embedding").layout;
    model::embedding_forward(x.f32(), s.tokens.data(), emb + unit.segment("wte").offset,
                             emb + unit.segment("wpe").offset, dims_, *alloc_, tp_);
    state_.release("embedding");
    s.inputs.push_back(std::move(x));
  } else {
    const auto it = received_forward_.find({mb, chunk});
    if (it == received_forward_.end()) {
      throw std::logic_error(fmt::format("engine: forward of ({}, {}) before its receive", mb, chunk));
    }
    s.inputs.push_back(std::move(it->second));
    received_forward_.erase(it);
  }
  s.acts.resize(static_cast<std::size_t>(info.layers));
  if (info.layers > 0) state_.acquire(layer_unit(info.first_layer));
  for (std::int64_t i = 0; i < info.layers; ++i) {
    const std::string name = layer_unit(info.first_layer + i);
    // ZeRO-3 prefetch: the next layer's parameters are gathered before this layer runs.
    if (i + 1 < info.layers) state_.acquire(layer_unit(info.first_layer + i + 1));
    // Offloaded parameters: their shards start up prefetch_depth layers ahead.
    for (std::int64_t k = 2; k <= state_.prefetch_depth() && i + k < info.layers; ++k) {
      state_.prefetch(layer_unit(info.first_layer + i + k));
    }
    const float* w = state_.acquire(name);
    const auto offsets = layer_offsets(state_.unit(name).layout);
    const char* out_tag = i + 1 < info.layers ? "act/ln1_in" : (info.last ? "act/lnf_in" : "pipeline_send");
    Buffer y = alloc_->allocate_floats(MemoryTier::kDevice, n, out_tag);
    model::layer_forward(model::layer_tensors(w, offsets), s.inputs.back().f32(), y.f32(),
                         s.acts[static_cast<std::size_t>(i)], dims_, *alloc_, tp_);
    model::drop_activations(s.acts[static_cast<std::size_t>(i)], plan_.recompute);
    state_.release(name);
    state_.release(name);
    s.inputs.push_back(std::move(y));
  }
  if (info.last) {
    const std::string wte_name = wte_unit();
    const float* wte_unit_params = state_.acquire(wte_name);
    const float* lnf = state_.acquire("final_norm");
    const auto& wte = state_.unit(wte_name).layout.segment("wte");
    const auto& lnf_layout = state_.unit("final_norm").layout;
    loss_sum_ += model::head_forward(
        s.inputs.back().f32(), targets.data(), lnf + lnf_layout.segment("lnf_w").offset,
        lnf + lnf_layout.segment("lnf_b").offset, wte_unit_params + wte.offset,
        state_.grads(wte_name) + wte.offset, loss_scale_, s.head, dims_, *alloc_, tp_);
    state_.release("final_norm");
    state_.release(wte_name);
  } else {
    to_send_forward_[{mb, chunk}] = std::move(s.inputs.back());
    s.inputs.pop_back();
  }
}

void Engine::backward(std::int64_t mb, std::int64_t chunk) {
  const ChunkInfo& info = chunks_[static_cast<std::size_t>(chunk)];
  const auto it = saved_.find({mb, chunk});
  if (it == saved_.end()) {
    throw std::logic_error(fmt::format("engine: backward of ({}, {}) before its forward", mb, chunk));
  }
  Saved& s = it->second;
  const std::int64_t n = dims_.act_local();
  Buffer dy;
  if (info.last) {
    dy = alloc_->allocate_floats(MemoryTier::kDevice, n, "backward_scratch");
    const float* lnf = state_.acquire("final_norm");
    const auto& lay = state_.unit("final_norm").layout;
    float* g = state_.grads("final_norm");
    model::head_backward(s.inputs.back().f32(), lnf + lay.segment("lnf_w").offset,
                         g + lay.segment("lnf_w").offset, g + lay.segment("lnf_b").offset, s.head,
                         dy.f32(), dims_);
    state_.release("final_norm");
    s.head = {};
    s.inputs.pop_back();
  } else {
    const auto r = received_backward_.find({mb, chunk});
    if (r == received_backward_.end()) {
      throw std::logic_error(fmt::format("engine: backward of ({}, {}) before its receive", mb, chunk));
    }
    dy = std::move(r->second);
    received_backward_.erase(r);
  }
  if (info.layers > 0) state_.acquire(layer_unit(info.first_layer + info.layers - 1));
  for (std::int64_t i = info.layers - 1; i >= 0; --i) {
    const std::string name = layer_unit(info.first_layer + i);
    if (i > 0) state_.acquire(layer_unit(info.first_layer + i - 1));  // ZeRO-3 prefetch
    for (std::int64_t k = 2; k <= state_.prefetch_depth() && i - k >= 0; ++k) {
      state_.prefetch(layer_unit(info.first_layer + i - k));
    }
    const float* w = state_.acquire(name);
    const auto offsets = layer_offsets(state_.unit(name).layout);
    float* g = state_.grads(name);
    const float* x = s.inputs[static_cast<std::size_t>(i)].f32();
    auto& acts = s.acts[static_cast<std::size_t>(i)];
    // Recomputation: rebuild what the forward dropped, right before it is needed.
    model::recompute_activations(model::layer_tensors(w, offsets), x, acts, plan_.recompute,
                                 dims_, *alloc_, tp_);
    const char* dx_tag = i == 0 && !info.first ? "pipeline_send" : "backward_scratch";
    Buffer dx = alloc_->allocate_floats(MemoryTier::kDevice, n, dx_tag);
    model::layer_backward(model::layer_tensors(w, offsets), model::layer_tensors(g, offsets), x,
                          acts, dy.f32(), dx.f32(), dims_, *alloc_, tp_);
    state_.release(name);
    state_.release(name);
    state_.layer_backward_done(name);  // offloaded gradients: reduced and sent down now
    s.acts[static_cast<std::size_t>(i)] = {};
    s.inputs.pop_back();
    dy = std::move(dx);
  }
  if (info.first) {
    const auto& lay = state_.unit("embedding").layout;
    float* g = state_.grads("embedding");
    model::embedding_backward(g + lay.segment("wte").offset, g + lay.segment("wpe").offset,
                              dy.f32(), s.tokens.data(), dims_, *alloc_, tp_);
  } else {
    to_send_backward_[{mb, chunk}] = std::move(dy);
  }
  saved_.erase(it);
}

void Engine::run_schedule(std::int64_t step, StepResult& result, Clock::time_point t_start) {
  tp_.reset_seconds();
  state_.reset_times();
  state_.zero_grads();
  loss_sum_ = 0;
  const std::int64_t pp_rank = groups_->coords().pp;
  const std::int64_t n = dims_.act_local();
  Communicator& pp = groups_->pp();
  auto& parts = result.parts;
  for (const PipelineOp& op : schedule_.ops[static_cast<std::size_t>(pp_rank)]) {
    const auto t0 = Clock::now();
    const double comm_before =
        tp_.comm_seconds() + state_.times().dp_comm_s + state_.times().offload_s;
    const ChunkInfo& info = chunks_[static_cast<std::size_t>(op.chunk)];
    const int peer = static_cast<int>(op.peer);
    const Key key{op.micro_batch, op.chunk};
    switch (op.kind) {
      case OpKind::kForward: forward(step, op.micro_batch, op.chunk); break;
      case OpKind::kBackward: backward(op.micro_batch, op.chunk); break;
      case OpKind::kRecvForward: {
        Buffer b = alloc_->allocate_floats(MemoryTier::kDevice, n, "act/ln1_in");
        pp.recv(b.f32(), n, peer, tag(op.micro_batch, info.vstage, 0));
        received_forward_[key] = std::move(b);
        break;
      }
      case OpKind::kRecvBackward: {
        Buffer b = alloc_->allocate_floats(MemoryTier::kDevice, n, "pipeline_recv");
        pp.recv(b.f32(), n, peer, tag(op.micro_batch, info.vstage, 1));
        received_backward_[key] = std::move(b);
        break;
      }
      case OpKind::kSendForward:
      case OpKind::kSendBackward: {
        const bool fwd = op.kind == OpKind::kSendForward;
        auto& pending = fwd ? to_send_forward_ : to_send_backward_;
        const auto it = pending.find(key);
        if (it == pending.end()) {
          throw std::logic_error(fmt::format("engine: {} of ({}, {}) before it was computed",
                                             to_string(op.kind), op.micro_batch, op.chunk));
        }
        PendingSend send{std::move(it->second), {}};
        pending.erase(it);
        const std::int64_t receiver = fwd ? info.vstage + 1 : info.vstage - 1;
        send.request = pp.send(send.buffer.f32(), n, peer, tag(op.micro_batch, receiver, fwd ? 0 : 1));
        sends_.push_back(std::move(send));
        break;
      }
    }
    const double dt = seconds_since(t0);
    const double inside =
        tp_.comm_seconds() + state_.times().dp_comm_s + state_.times().offload_s - comm_before;
    switch (op.kind) {
      case OpKind::kForward: parts.forward_s += dt - inside; break;
      case OpKind::kBackward: parts.backward_s += dt - inside; break;
      case OpKind::kRecvForward:
      case OpKind::kRecvBackward: parts.bubble_s += dt; break;
      default: parts.pp_comm_s += dt; break;
    }
    const std::string name = to_string(op.kind);
    const bool compute = op.kind == OpKind::kForward || op.kind == OpKind::kBackward;
    TraceEvent event;
    event.name = name;
    event.category = op_category(name);
    event.tid = compute ? compute_tid(pp_rank) : p2p_tid(pp_rank);
    event.start_s = std::chrono::duration<double>(t0 - t_start).count();
    event.duration_s = dt;
    event.args = Json{{"micro_batch", op.micro_batch}, {"chunk", op.chunk}};
    result.events.push_back(std::move(event));
  }
  sum_sequence_parallel_grads();
  {
    const auto t0 = Clock::now();
    for (auto& s : sends_) s.request.wait();
    sends_.clear();
    parts.pp_comm_s += seconds_since(t0);
  }
  if (!saved_.empty() || !received_forward_.empty() || !received_backward_.empty() ||
      !to_send_forward_.empty() || !to_send_backward_.empty()) {
    throw std::logic_error("engine: the schedule left activations or messages behind");
  }
}

void Engine::sum_sequence_parallel_grads() {
  // With SP each TP rank's LayerNorm gain/bias gradients cover only its token rows: sum
  // them over TP (Megatron does the same once per step) so every rank holds the full one.
  if (!dims_.sp) return;
  static constexpr const char* kNorms[] = {"ln1_w", "ln1_b", "ln2_w", "ln2_b", "lnf_w", "lnf_b"};
  for (const auto& u : state_.units()) {
    if (u.layout.kind != UnitKind::kLayer && u.layout.kind != UnitKind::kFinalNorm) {
      continue;
    }
    float* g = state_.grads(u.layout.name);
    for (const auto& seg : u.layout.segments) {
      for (const char* name : kNorms) {
        if (seg.name == name) tp_.all_reduce_sum(g + seg.offset, seg.count());
      }
    }
  }
}

double Engine::forward_backward(std::int64_t step) {
  StepResult result;
  run_schedule(step, result, Clock::now());
  return global_loss();
}

double Engine::global_loss() {
  // The last stage's sums (counted once per TP group), summed over the world.
  double loss = (groups_->is_last_stage() && groups_->coords().tp == 0) ? loss_sum_ : 0.0;
  world_->all_reduce_sum(&loss, 1);
  return loss / global_tokens_;
}

StepResult Engine::step(std::int64_t step) {
  StepResult result;
  world_->barrier();  // a common origin for every rank's trace and step time
  const auto t_start = Clock::now();
  run_schedule(step, result, t_start);
  const std::int64_t pp_rank = groups_->coords().pp;
  auto& parts = result.parts;
  const auto t_tail = Clock::now();
  result.grad_norm = state_.reduce_and_update(train_.optimizer, static_cast<int>(step + 1), *world_);
  TraceEvent tail;
  tail.name = "optimizer_step";
  tail.category = op_category(tail.name);
  tail.tid = compute_tid(pp_rank);
  tail.start_s = std::chrono::duration<double>(t_tail - t_start).count();
  tail.duration_s = seconds_since(t_tail);
  result.events.push_back(std::move(tail));
  result.loss = global_loss();
  result.step_s = seconds_since(t_start);
  parts.tp_comm_s = tp_.comm_seconds();
  parts.dp_comm_s = state_.times().dp_comm_s;
  parts.optimizer_s = state_.times().optimizer_s;
  parts.offload_s = state_.times().offload_s;
  result.transfers = state_.transfers();
  parts.other_s = result.step_s - parts.sum();
  return result;
}

}  // namespace strata::engine
