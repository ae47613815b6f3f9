// Replays one pipeline rank's Program through a Backend (see engine.h).
//
// How a step's time is split (this rank's view; the report picks the slowest rank):
//   forward_s / backward_s  passes minus the TP collectives and the state moves inside them
//   tp_comm_s   TP collectives (layers, embedding, vocab-parallel loss), SP norm sums and the
//               replicated KV heads' gradient sums
//   dp_comm_s   gathers, gradient reductions, the tied-embedding sum, ZeRO-1/2 gathers
//   offload_s   fetches, gradient offload, and the transfers inside an offloaded optimizer step
//   pp_comm_s   posting sends and completing the ones left at the end of the pipeline (those
//               a receive proves complete are waited for inside it: bubble_s)
//   bubble_s    blocked in pipeline receives (waiting for the neighbouring stage)
//   optimizer_s grad norm and AdamW;  other_s the rest (loss reduction, bookkeeping).
// The split is exact on the CPU backend, where every op blocks but the host AdamW that its
// host stream's thread runs beside the backward: of that, only what the step waited for
// counts. On a backend that overlaps streams it adds up each op's own duration.
#include "executor/engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/optimizer_schedule.h"
#include "cost_model/specs/partition.h"

namespace strata::engine {
namespace {

constexpr int kMaxTag = 32767;  // the MPI standard's smallest allowed MPI_TAG_UB
using Kind = ProgramOpKind;

bool is_dp_comm(Kind k) {
  return k == Kind::kGather || k == Kind::kReduceGrads || k == Kind::kTiedEmbeddingSum ||
         k == Kind::kGatherParams;
}
bool is_offload(Kind k) { return k == Kind::kFetch || k == Kind::kOffloadGrads; }

// Whether every block of `captured` is among `now` (both sorted).
bool all_free(const std::vector<FreeBlock>& captured, const std::vector<FreeBlock>& now) {
  return std::includes(now.begin(), now.end(), captured.begin(), captured.end());
}

// Ops the Program puts on another stream whose work also runs on the compute stream: the
// gradient norm's sums of squares (Backend::sum_of_squares), the SP norm sums and the KV
// copies' sums (the TP group's and its KV-copies groups' collectives are on the compute
// stream, group_streams.h). Their compute work waits
// for what their own stream waited for, and waiting for them covers it.
bool also_on_compute(Kind k) {
  return k == Kind::kGradNorm || k == Kind::kSumNormGrads || k == Kind::kSumKvGrads;
}

}  // namespace

std::string why_steps_not_captured(const Plan& plan, bool collectives_on_device) {
  if (plan.pp > 1) {
    return fmt::format("pp {}: the pipeline's messages complete through host requests, which a "
                       "graph cannot hold", plan.pp);
  }
  if (plan.offload != OffloadPlan{}) {
    return "offloaded model state: its host work and copies to and from host memory are not "
           "captured";
  }
  if (plan.world_size() > 1 && !collectives_on_device) {
    return fmt::format("{} ranks whose collectives go through host memory (host-staged: ranks "
                       "sharing a GPU or threads of one process); NCCL's are captured",
                       plan.world_size());
  }
  return "";
}

Engine::Engine(Backend& backend, const ModelSpec& model, const TrainSpec& train, const Plan& plan,
               const ProcessGroups& groups, Communicator& host_world,
               const data::BatchSampler& sampler, const OffloadOptions& offload_options,
               const model::UnitInit& init)
    : backend_(&backend),
      model_(model),
      train_(train),
      plan_(plan),
      groups_(&groups),
      host_world_(&host_world),
      sampler_(&sampler),
      dims_(model::make_dims(model, plan.micro_batch, plan.tp, groups.coords().tp,
                             plan.sequence_parallel, backend.vocab_row_alignment())),
      tp_(groups.tp(), backend.compute_dtype()),
      program_(make_rank_program(model, train, plan, groups.coords().pp,
                                 executor_program_options(backend.kind(),
                                                          offload_options.prefetch_depth))),
      state_(backend,
             rank_unit_layouts(model, plan, groups.coords().pp, groups.coords().tp,
                               backend.vocab_row_alignment()),
             plan, groups, host_world, train.seed, offload_options, plan.micro_batches(train),
             init) {
  for (std::int64_t c = 0; c < plan.virtual_stages; ++c) {
    chunks_.push_back(chunk_layers(model, plan, groups.coords().pp, c));
  }
  for (std::size_t u = 0; u < program_.units.size(); ++u) {
    if (program_.units[u].name != state_.unit(u).layout.name) {
      throw std::logic_error("engine: the Program's units and the model state's differ");
    }
  }
  const std::int64_t m = plan.micro_batches(train);
  if (m * plan.pp * plan.virtual_stages * 2 > kMaxTag) {
    throw InfeasiblePlan(fmt::format(
        "executor: {} micro-batches x {} virtual stages need more pipeline message tags than "
        "MPI guarantees ({})", m, plan.pp * plan.virtual_stages, kMaxTag));
  }
  host_apart_ = backend.host_stream_apart() && !state_.has_nvme_store() &&
                (!backend.host_stream_host_memory_only() || state_.host_steps_host_only());
  carrying_ = host_apart_ && program_.carries();
  global_tokens_ = static_cast<double>(train.global_batch) * static_cast<double>(model.seq_len);
  if (backend.captures_steps()) {
    why_not_captured_ = why_steps_not_captured(plan, backend.collectives_on_device());
    if (why_not_captured_.empty()) {
      capture_ = std::make_unique<Capture>();
      const auto floats = static_cast<std::int64_t>(sizeof(DeviceStepScalars) / sizeof(float));
      capture_->scalars = backend.allocate(MemoryTier::kDevice, DType::kF32, floats, "step_scalars");
      capture_->scalars_staged =
          backend.allocate(MemoryTier::kHost, DType::kF32, floats, "step_scalars");
      state_.use_device_scalars(static_cast<DeviceStepScalars*>(capture_->scalars.data()));
    }
  }
  bool has_head = false;
  for (const auto& c : chunks_) has_head = has_head || c.last;
  if (has_head) {
    dlosses_ = backend.allocate(MemoryTier::kDevice, DType::kF32, dims_.BT(), "losses", false);
    backend.fill(dlosses_.f32(), static_cast<float>(1.0 / global_tokens_), dims_.BT());
  }
}

Engine::~Engine() {
  try {
    backend_->host_wait(Stream::kHost);
  } catch (...) {
    // A step that failed on this thread may leave host work that failed too: the step's own
    // error is the one reported.
  }
}

ModelState& Engine::state() {
  finish_carried();
  return state_;
}

void Engine::finish_carried() {
  if (carried_.empty() && carried_in_.empty()) return;
  backend_->host_wait(Stream::kHost);
  carried_.clear();
  carried_in_.clear();
}

Stream Engine::issue_stream(const ProgramOp& op) const {
  return op.stream == Stream::kHost && !host_apart_ ? Stream::kCompute : op.stream;
}

Engine::OutputLayer Engine::output_layer() const {
  if (const std::int32_t o = state_.index("output"); o >= 0) {
    return {static_cast<std::size_t>(o), "lm_head"};
  }
  const std::int32_t e = state_.index("embedding");
  return {static_cast<std::size_t>(e >= 0 ? e : state_.index("wte_copy")), "wte"};
}

int Engine::tag(std::int64_t mb, std::int64_t receiver_vstage, int direction) const {
  return static_cast<int>(
      pipeline_message_tag(plan_.pp, plan_.virtual_stages, mb, receiver_vstage, direction == 0));
}

Tensor Engine::device_tokens(const std::vector<std::int32_t>& host, const char* tag) {
  Tensor t = backend_->allocate(MemoryTier::kDevice, DType::kI32,
                                static_cast<std::int64_t>(host.size()), tag, false);
  backend_->copy(t.data(), host.data(), t.bytes(), Stream::kCompute);
  return t;
}

Tensor Engine::staged_device_tokens(const Key& key, int which) {
  const Tensor& host = capture_->tokens.at(key)[static_cast<std::size_t>(which)];
  Tensor t = backend_->allocate(MemoryTier::kDevice, DType::kI32, host.size(), "data", false);
  backend_->copy_async(t.data(), host.data(), t.bytes(), Stream::kCompute);
  return t;
}

void Engine::stage_inputs(std::int64_t step, double lr) {
  const auto bt = static_cast<std::int64_t>(dims_.BT());
  for (std::int32_t i = 0; i < program_.tail_begin; ++i) {
    const ProgramOp& op = program_.ops[static_cast<std::size_t>(i)];
    if (op.kind != Kind::kForward) continue;
    const ChunkLayers& info = chunks_[static_cast<std::size_t>(op.chunk)];
    if (!info.first && !info.last) continue;
    auto& staged = capture_->tokens[{op.micro_batch, op.chunk}];
    for (Tensor& t : staged) {
      if (t.empty()) t = backend_->allocate(MemoryTier::kHost, DType::kI32, bt, "data_staging", false);
    }
    // The last launch's copies have run (the step ended with a synchronize).
    backend_->on_host("stage the tokens of a captured step",
                      {host_writes(staged[0].data(), staged[0].bytes()),
                       host_writes(staged[1].data(), staged[1].bytes())},
                      [&] {
                        sampler_->micro_batch(step, train_.global_batch, plan_.dp,
                                              groups_->coords().dp, op.micro_batch,
                                              plan_.micro_batch, staged[0].as<std::int32_t>(),
                                              staged[1].as<std::int32_t>());
                      });
  }
  const DeviceStepScalars scalars =
      step_scalars(adamw_step(train_.optimizer, static_cast<int>(step + 1), lr));
  Tensor& staged = capture_->scalars_staged;
  backend_->on_host("stage the scalars of a captured step", {host_writes(staged.data(), staged.bytes())},
                    [&] { std::memcpy(staged.data(), &scalars, sizeof scalars); });
}

void Engine::compute(const ProgramOp& op, bool forward, std::int64_t step, std::int64_t mb,
                     std::int64_t chunk) {
  const ChunkLayers& info = chunks_[static_cast<std::size_t>(chunk)];
  model::LayerOps& ops = backend_->layer_ops();
  const std::int64_t cb = dtype_bytes(backend_->compute_dtype());
  const std::int64_t n = dims_.act_local();
  const auto u = static_cast<std::size_t>(op.unit);
  Saved& s = saved_[{mb, chunk}];
  // A tensor the family does not have (wpe with rotary positions, LayerNorm biases) is null.
  const auto find = [&](std::size_t unit, const char* segment) -> const ParamSegment* {
    for (const ParamSegment& s : state_.unit(unit).layout.segments) {
      if (s.name == segment) return &s;
    }
    return nullptr;
  };
  const auto weight = [&](std::size_t unit, const char* segment) -> const void* {
    const ParamSegment* s = find(unit, segment);
    return s == nullptr ? nullptr : static_cast<const char*>(state_.weights(unit)) + s->offset * cb;
  };
  const auto grad = [&](std::size_t unit, const char* segment) -> float* {
    const ParamSegment* s = find(unit, segment);
    return s == nullptr ? nullptr : state_.grads(unit) + s->offset;
  };
  switch (op.part) {
    case Part::kEmbedding:
      if (forward) {
        Tensor x = ops.activations(n, "act/ln1_in");
        model::embedding_forward(ops, x.data(), s.tokens.as<std::int32_t>(), weight(u, "wte"),
                                 weight(u, "wpe"), dims_, tp_);
        s.inputs.push_back(std::move(x));
      } else {
        model::embedding_backward(ops, grad(u, "wte"), grad(u, "wpe"), pass_grad_.data(),
                                  s.tokens.as<std::int32_t>(), dims_, tp_);
      }
      return;
    case Part::kLayer: {
      const std::int64_t i = state_.unit(u).layout.layer - info.first_layer;
      const UnitLayout& layout = state_.unit(u).layout;
      const model::LayerWeights w = model::layer_tensors(state_.weights(u), layout, cb);
      s.acts.resize(static_cast<std::size_t>(info.layers));
      model::LayerActivations& acts = s.acts[static_cast<std::size_t>(i)];
      if (forward) {
        const char* tag = i + 1 < info.layers ? "act/ln1_in" : (info.last ? "act/lnf_in" : "pipeline_send");
        Tensor y = ops.activations(n, tag);
        model::layer_forward(ops, w, s.inputs.back().data(), y.data(), acts, dims_, tp_);
        model::drop_activations(acts, plan_.recompute);
        s.inputs.push_back(std::move(y));
      } else {
        const void* x = s.inputs[static_cast<std::size_t>(i)].data();
        // Recomputation: rebuild what the forward dropped, right before it is needed.
        model::recompute_activations(ops, w, x, acts, plan_.recompute, dims_, tp_);
        model::layer_backward(ops, w, model::layer_tensors(state_.grads(u), layout, 4), x, acts,
                              pass_grad_.data(), dims_, tp_);
        s.inputs.pop_back();
      }
      return;
    }
    case Part::kHead: {
      const OutputLayer out = output_layer();
      if (forward) {
        Tensor& targets = targets_.at({mb, chunk});
        float* losses = losses_.f32() + mb * dims_.BT();
        model::head_forward(ops, s.inputs.back().data(), targets.as<std::int32_t>(),
                            weight(u, "lnf_w"), weight(u, "lnf_b"), weight(out.unit, out.segment),
                            grad(out.unit, out.segment), dlosses_.f32(), losses, s.head, dims_,
                            tp_);
        targets_.erase({mb, chunk});
      } else {
        pass_grad_ = ops.activations(n, "backward_scratch");
        model::head_backward(ops, s.inputs.back().data(), weight(u, "lnf_w"), grad(u, "lnf_w"),
                             grad(u, "lnf_b"), s.head, pass_grad_.data(), dims_);
        s.inputs.pop_back();
      }
      return;
    }
    case Part::kNone: break;
  }
  throw std::logic_error(fmt::format("engine: compute op of step {} with no part", step));
}

void Engine::state_move(const ProgramOp& op, std::int64_t step, StepResult& result) {
  const auto u = static_cast<std::size_t>(op.unit);
  switch (op.kind) {
    case Kind::kFetch: state_.fetch(u); return;
    case Kind::kGather: state_.gather(u); return;
    case Kind::kRelease: state_.release(u); return;
    case Kind::kSumNormGrads: state_.sum_norm_grads(u); return;
    case Kind::kSumKvGrads: state_.sum_kv_grads(u); return;
    case Kind::kReduceGrads: state_.reduce_grads(u); return;
    case Kind::kOffloadGrads: state_.offload_grads(u); return;
    case Kind::kTiedEmbeddingSum: state_.tied_embedding_sum(u); return;
    case Kind::kGradNorm: result.grad_norm = state_.grad_norm(train_.optimizer); return;
    case Kind::kOptimizerStep: {
      const int adam_step = static_cast<int>(step + 1);
      if (op.stream != Stream::kHost) {
        state_.optimizer_step({u}, train_.optimizer, adam_step, result.lr);
        return;
      }
      ModelState::HostStep host = state_.host_optimizer_step(u, train_.optimizer, adam_step, result.lr, host_apart_);
      if (host_apart_) {
        backend_->run_on_host_stream(host.op, std::move(host.touches), std::move(host.work));
      } else {
        host.work();
      }
      return;
    }
    case Kind::kGatherParams: state_.gather_params(u); return;
    default: break;
  }
  throw std::logic_error("engine: " + to_string(op.kind) + " is not a state move");
}

void Engine::message(const ProgramOp& op) {
  model::LayerOps& ops = backend_->layer_ops();
  const std::int64_t n = dims_.act_local();
  const DType c = backend_->compute_dtype();
  const Key key{op.micro_batch, op.chunk};
  const std::int64_t vstage = chunks_[static_cast<std::size_t>(op.chunk)].vstage;
  const bool forward = op.kind == Kind::kRecvForward || op.kind == Kind::kSendForward;
  // With one pipeline rank (interleaved chunks) a message goes to this rank itself: the
  // tensor is handed over (the send always comes first: the schedule is deadlock-free).
  const bool to_self = op.peer == groups_->coords().pp;
  // The buffers are the passes' activations; the Program's message (what the deadlock check
  // matched send to receive by) must be exactly that.
  if (message_elements(op, plan_.micro_batch) != n || op.message_dtype != c) {
    throw std::logic_error(fmt::format("engine: {} of ({}, {}) moves {} elements of {}, but the "
                                       "Program's message is {}", to_string(op.kind),
                                       op.micro_batch, op.chunk, n, to_string(c),
                                       message_shape(op, plan_.micro_batch)));
  }
  switch (op.kind) {
    case Kind::kRecvForward:
    case Kind::kRecvBackward: {
      auto& received = forward ? received_forward_ : received_backward_;
      if (to_self) {
        auto& handed = forward ? handed_forward_ : handed_backward_;
        const auto it = handed.find(key);
        if (it == handed.end()) {
          throw std::logic_error(fmt::format("engine: {} of ({}, {}) before its send",
                                             to_string(op.kind), op.micro_batch, op.chunk));
        }
        received[key] = std::move(it->second);
        handed.erase(it);
        return;
      }
      Tensor b = ops.activations(n, forward ? "act/ln1_in" : "pipeline_recv");
      Communicator& link = groups_->link(forward ? PipeLink::kForwardIn : PipeLink::kBackwardIn);
      // The pool hands blocks out in compute-stream order: kernels queued on the compute
      // stream may still read what this block held (on a GPU, the last backward's gradient).
      // The link's own stream waits for them before the message lands in it.
      backend_->wait(link, backend_->record(Stream::kCompute));
      link.recv(b.data(), n, c, /*peer=*/0, tag(op.micro_batch, vstage, forward ? 0 : 1));
      received[key] = std::move(b);
      complete_sends(op);
      return;
    }
    case Kind::kSendForward:
    case Kind::kSendBackward: {
      auto& pending = forward ? to_send_forward_ : to_send_backward_;
      const auto it = pending.find(key);
      if (it == pending.end()) {
        throw std::logic_error(fmt::format("engine: {} of ({}, {}) before it was computed",
                                           to_string(op.kind), op.micro_batch, op.chunk));
      }
      const std::int64_t receiver = forward ? vstage + 1 : vstage - 1;
      const std::int64_t receiver_chunk = receiver / plan_.pp;
      if (to_self) {
        auto& handed = forward ? handed_forward_ : handed_backward_;
        handed[{op.micro_batch, receiver_chunk}] = std::move(it->second);
        pending.erase(it);
        return;
      }
      PendingSend send{std::move(it->second), {}};
      pending.erase(it);
      // The link's stream is not the compute stream: it waits for the kernels that wrote the
      // message (an event, not a host stall).
      Communicator& link = groups_->link(forward ? PipeLink::kForwardOut : PipeLink::kBackwardOut);
      backend_->wait(link, backend_->record(Stream::kCompute));
      send.request = link.send(send.buffer.data(), n, c, /*peer=*/1,
                               tag(op.micro_batch, receiver, forward ? 0 : 1));
      sends_[forward ? 0 : 1].push_back(std::move(send));
      return;
    }
    default: break;
  }
  throw std::logic_error("engine: " + to_string(op.kind) + " is not a message");
}

void Engine::complete_sends(const ProgramOp& recv) {
  // The peer received these sends before it posted the message that has just arrived (its
  // receives block: program_sends.h), so their requests are complete or about to be without
  // any further action of the peer: MPI's matching receives have completed, NCCL's and the
  // host-staged transfers have finished. The waits return at once, and their buffers go back
  // to the pool here instead of at the pipeline's end. Waiting for the request also orders
  // the block's reuse after the link stream's read of it (an event on CUDA).
  const std::array<std::int32_t, 2> known{recv.forward_sends_complete, recv.backward_sends_complete};
  for (std::size_t d = 0; d < 2; ++d) {
    while (sends_completed_[d] < known[d]) {
      if (sends_[d].empty()) {
        throw std::logic_error(fmt::format(
            "engine: {} of ({}, {}) completes {} {} sends but {} were posted",
            to_string(recv.kind), recv.micro_batch, recv.chunk, known[d],
            d == 0 ? "forward" : "backward", sends_completed_[d]));
      }
      sends_[d].front().request.wait();
      sends_[d].pop_front();
      ++sends_completed_[d];
    }
  }
}

void Engine::begin_pass(const ProgramOp& pass, std::int64_t step) {
  const bool forward = pass.kind == Kind::kForward;
  const ChunkLayers& info = chunks_[static_cast<std::size_t>(pass.chunk)];
  const Key key{pass.micro_batch, pass.chunk};
  if (forward) {
    Saved& s = saved_[key];
    if (staged_inputs_ && (info.first || info.last)) {
      if (info.first) s.tokens = staged_device_tokens(key, 0);
      if (info.last) targets_[key] = staged_device_tokens(key, 1);
    } else if (info.first || info.last) {
      const auto tokens = static_cast<std::size_t>(dims_.BT());
      std::vector<std::int32_t> inputs(tokens), targets(tokens);
      sampler_->micro_batch(step, train_.global_batch, plan_.dp, groups_->coords().dp,
                            pass.micro_batch, plan_.micro_batch, inputs.data(), targets.data());
      if (info.first) s.tokens = device_tokens(inputs, "data");
      if (info.last) targets_[key] = device_tokens(targets, "data");
    }
    if (!info.first) {
      const auto it = received_forward_.find(key);
      if (it == received_forward_.end()) {
        throw std::logic_error(fmt::format("engine: forward of ({}, {}) before its receive",
                                           pass.micro_batch, pass.chunk));
      }
      s.inputs.push_back(std::move(it->second));
      received_forward_.erase(it);
    }
    return;
  }
  if (saved_.count(key) == 0) {
    throw std::logic_error(fmt::format("engine: backward of ({}, {}) before its forward",
                                       pass.micro_batch, pass.chunk));
  }
  if (!info.last) {
    const auto it = received_backward_.find(key);
    if (it == received_backward_.end()) {
      throw std::logic_error(fmt::format("engine: backward of ({}, {}) before its receive",
                                         pass.micro_batch, pass.chunk));
    }
    pass_grad_ = std::move(it->second);
    received_backward_.erase(it);
  }
}

void Engine::end_pass(const ProgramOp& pass) {
  const ChunkLayers& info = chunks_[static_cast<std::size_t>(pass.chunk)];
  const Key key{pass.micro_batch, pass.chunk};
  if (pass.kind == Kind::kForward) {
    if (!info.last) {
      Saved& s = saved_.at(key);
      to_send_forward_[key] = std::move(s.inputs.back());
      s.inputs.pop_back();
    }
    return;
  }
  if (!info.first) {
    to_send_backward_[key] = std::move(pass_grad_);
  }
  pass_grad_.reset();
  saved_.erase(key);
}

Engine::Marks Engine::issue(const ProgramOp& op, const MarkList& done, const Marks& floor,
                            std::vector<OpRecord>& records, bool in_pass, std::int32_t mb,
                            std::int32_t chunk, const std::function<void()>& run, bool timed) {
  const Stream s = issue_stream(op);
  // Device memory is handed out in compute-stream order: another stream first waits for
  // what the compute stream has been given so far.
  if (s != Stream::kCompute) backend_->wait(s, backend_->record(Stream::kCompute));
  for (const auto& [stream, mark] : floor) backend_->wait(s, mark);
  for (std::int32_t a : op.after) {
    if (a < 0) continue;
    for (const auto& [stream, mark] : done[static_cast<std::size_t>(a)]) backend_->wait(s, mark);
  }
  OpRecord rec;
  rec.kind = op.kind;
  rec.stream = op.stream;  // the trace's track: the Program's stream
  rec.micro_batch = op.is_pass() || op.is_message() ? op.micro_batch : mb;
  rec.chunk = op.is_pass() || op.is_message() ? op.chunk : chunk;
  rec.unit = op.unit >= 0 ? program_.units[static_cast<std::size_t>(op.unit)].name : "";
  rec.in_pass = in_pass;
  const std::size_t index = records.size();
  records.push_back(rec);
  const bool compute_too = s != Stream::kCompute && also_on_compute(op.kind);
  if (compute_too) backend_->wait(Stream::kCompute, backend_->record(s));
  const double tp_before = tp_.comm_seconds();
  if (timed) records[index].start = backend_->timestamp(s);
  run();
  if (timed) records[index].end = backend_->timestamp(s);
  records[index].tp_s = tp_.comm_seconds() - tp_before;
  if (compute_too) return {{s, backend_->record(s)}, {Stream::kCompute, backend_->record(Stream::kCompute)}};
  return {{s, backend_->record(s)}};
}

void Engine::run_pipeline(std::int64_t step, std::vector<OpRecord>& records) {
  MarkList done;
  done.reserve(static_cast<std::size_t>(program_.tail_begin));
  for (std::int32_t i = 0; i < program_.tail_begin; ++i) {
    const ProgramOp& op = program_.ops[static_cast<std::size_t>(i)];
    const std::size_t record = records.size();
    if (!op.is_pass()) {
      done.push_back(issue(op, done, {}, records, false, -1, -1, [&] { message(op); }));
      records[record].op = i;
      continue;
    }
    const PassBody& body = program_.bodies[static_cast<std::size_t>(op.body)];
    const bool forward = op.kind == Kind::kForward;
    // Waiting for a pass means waiting for its compute stream (program.h, rule 2): the
    // mark issue() records on it once the whole body has been issued.
    done.push_back(issue(op, done, {}, records, false, -1, -1, [&] {
      begin_pass(op, step);
      // The body: every op after the pass's start (its compute-stream position).
      const Marks floor{{Stream::kCompute, backend_->record(Stream::kCompute)}};
      MarkList body_done;
      for (const ProgramOp& b : body.ops) {
        if (b.kind == Kind::kOptimizerStep && !stepping_) {
          body_done.emplace_back();  // evaluation and gradient checks step no optimizer
          continue;
        }
        wait_for_carried(i, static_cast<std::int32_t>(body_done.size()), issue_stream(b),
                         records[record]);
        const std::size_t body_record = records.size();
        body_done.push_back(issue(b, body_done, floor, records, true, op.micro_batch, op.chunk, [&] {
          if (b.kind == Kind::kCompute) {
            compute(b, forward, step, op.micro_batch, op.chunk);
          } else {
            state_move(b, step, *result_);
          }
        }));
        records[body_record].op = i;
        records[body_record].body_op = static_cast<std::int32_t>(body_done.size() - 1);
      }
      end_pass(op);
    }));
    records[record].op = i;
  }
}

void Engine::run_tail(std::int64_t step, std::vector<OpRecord>& records) {
  // Rule 3: the tail starts after everything of the pipeline, on every stream.
  std::vector<std::pair<Stream, int>> floor;
  for (int s = 0; s < kStreamCount; ++s) {
    const auto stream = static_cast<Stream>(s);
    floor.push_back({stream, backend_->record(stream)});
  }
  MarkList done;
  for (std::size_t i = static_cast<std::size_t>(program_.tail_begin); i < program_.ops.size();) {
    const ProgramOp& op = program_.ops[i];
    // `after` indexes the whole step list; the tail's own entries start at tail_begin.
    ProgramOp local = op;
    for (auto& a : local.after) a = a >= program_.tail_begin ? a - program_.tail_begin : -1;
    const std::size_t record = records.size();
    if (carrying_ && static_cast<std::int32_t>(i) >= program_.carried_begin) {
      done.push_back(issue_carried(local, i, step, done, floor, records));
      ++i;
      continue;
    }
    const std::size_t fused = fused_optimizer_steps(i);
    if (fused == 1) {
      done.push_back(issue(local, done, floor, records, false, -1, -1,
                           [&] { state_move(op, step, *result_); }));
      records[record].op = static_cast<std::int32_t>(i);
      ++i;
      continue;
    }
    // Optimizer steps one after another, each after the same ops on the compute stream: issued
    // as one call, which runs them as the Program orders them (nothing can run between them
    // on that stream) in one fused launch. The first op's record times the call; each further
    // op is done when it is (a mark at its end, length 0), so every op of the Program keeps
    // its one trace event.
    std::vector<std::size_t> units;
    for (std::size_t k = i; k < i + fused; ++k) {
      units.push_back(static_cast<std::size_t>(program_.ops[k].unit));
    }
    const Marks marks = issue(local, done, floor, records, false, -1, -1, [&] {
      state_.optimizer_step(units, train_.optimizer, static_cast<int>(step + 1), result_->lr);
    });
    records[record].op = static_cast<std::int32_t>(i);
    for (std::size_t k = i; k < i + fused; ++k) {
      done.push_back(marks);
      if (k == i) continue;
      OpRecord rec = records[record];
      rec.op = static_cast<std::int32_t>(k);
      rec.unit = program_.units[units[k - i]].name;
      rec.start = rec.end;
      rec.fused_into = static_cast<std::int32_t>(i);
      records.push_back(rec);
    }
    i += fused;
  }
}

Engine::Marks Engine::issue_carried(const ProgramOp& local, std::size_t i, std::int64_t step,
                                   const MarkList& done, const Marks& floor,
                                   std::vector<OpRecord>& records) {
  const ProgramOp& op = program_.ops[i];
  auto span = std::make_shared<HostSpan>();
  // Untimed by the backend: its marks are cleared with the step, and this op runs past it.
  // The host thread stamps it instead, for the trace of the step it runs in.
  const Marks marks = issue(local, done, floor, records, false, -1, -1, [&] {
    ModelState::HostStep host = state_.host_optimizer_step(
        static_cast<std::size_t>(op.unit), train_.optimizer, static_cast<int>(step + 1), result_->lr,
        /*apart=*/true);
    backend_->run_on_host_stream(host.op, std::move(host.touches), [work = std::move(host.work), span] {
      span->start = std::chrono::steady_clock::now();
      work();
      span->end = std::chrono::steady_clock::now();
      span->done.store(true, std::memory_order_release);
    });
  }, /*timed=*/false);
  records.pop_back();
  carried_.push_back({static_cast<std::int32_t>(i), program_.units[static_cast<std::size_t>(op.unit)].name,
                      span, marks});
  return marks;
}

void Engine::wait_for_carried(std::int32_t op, std::int32_t body_op, Stream stream, OpRecord& pass) {
  if (carried_in_.empty()) return;
  for (std::size_t w = 0; w < program_.carried_waits.size(); ++w) {
    const RankProgram::CarriedWait& at = program_.carried_waits[w];
    if (at.op != op || at.body_op != body_op || w >= carried_in_.size()) continue;
    CarriedStep& carried = carried_in_[w];
    const int before = backend_->timestamp(stream);
    for (const auto& [s, mark] : carried.done) backend_->wait(stream, mark);
    pass.carried_waits.push_back({before, backend_->timestamp(stream)});
    carried.done.clear();
  }
}

void Engine::trace_carried(std::chrono::steady_clock::time_point step_start, std::int64_t pp_rank,
                           std::vector<TraceEvent>& events) const {
  for (const CarriedStep& c : carried_in_) {
    // Every carried op has its event, so that a step's trace is its Program op for op; what
    // of it ran before this step began is not this step's time (a length 0 at 0 when all).
    double start = 0, end = 0;
    if (c.span->done.load(std::memory_order_acquire)) {
      start = std::max(0.0, std::chrono::duration<double>(c.span->start - step_start).count());
      end = std::max(start, std::chrono::duration<double>(c.span->end - step_start).count());
    }
    TraceEvent event;
    event.name = to_string(Kind::kOptimizerStep);
    event.category = op_category(event.name);
    event.tid = stream_tid(pp_rank, Stream::kHost);
    event.start_s = start;
    event.duration_s = end - start;
    event.args = Json::object();
    event.args["unit"] = c.unit;
    event.args["op"] = c.op;
    event.args["carried"] = true;  // the last step's update, run beside this step
    events.push_back(std::move(event));
  }
}

std::size_t Engine::fused_optimizer_steps(std::size_t i) const {
  const ProgramOp& first = program_.ops[i];
  if (first.kind != Kind::kOptimizerStep || first.stream != Stream::kCompute) return 1;
  std::size_t end = i + 1;
  while (end < program_.ops.size() && program_.ops[end].kind == Kind::kOptimizerStep &&
         program_.ops[end].stream == first.stream && program_.ops[end].after == first.after) {
    ++end;
  }
  return end - i;
}

double Engine::global_loss() {
  // The last stage's per-token losses (counted once per TP group), summed in a fixed order,
  // then over the world.
  double loss = 0;
  if (!losses_.empty() && groups_->coords().tp == 0) {
    std::vector<float> host(static_cast<std::size_t>(losses_.size()));
    backend_->copy(host.data(), losses_.data(), losses_.bytes(), Stream::kCompute);
    for (float l : host) loss += l;
  }
  host_world_->all_reduce_sum(&loss, 1);
  return loss / global_tokens_;
}

void Engine::begin_step() {
  tp_.reset_seconds();
  state_.reset_transfers();
  state_.begin_step();
  backend_->clear_timestamps();
  if (!dlosses_.empty()) {
    // Zeroed in place, at the same address step after step: a captured step writes its losses
    // where it was captured writing them (an evaluation between two replays included).
    const std::int64_t n = plan_.micro_batches(train_) * dims_.BT();
    if (losses_.size() == n) {
      backend_->zero(losses_.data(), DType::kF32, n, Stream::kCompute);
    } else {
      losses_.reset();
      losses_ = backend_->allocate(MemoryTier::kDevice, DType::kF32, n, "losses");
    }
  }
}

void Engine::finish_sends(std::vector<OpRecord>& records) {
  OpRecord rec;
  rec.kind = Kind::kSendForward;  // accounted as pipeline communication
  rec.stream = Stream::kP2p;
  rec.start = backend_->timestamp(Stream::kP2p);
  for (auto& direction : sends_) {
    for (auto& s : direction) s.request.wait();
    direction.clear();
  }
  sends_completed_ = {0, 0};
  rec.end = backend_->timestamp(Stream::kP2p);
  rec.unit = "wait_sends";
  records.push_back(rec);
  if (!saved_.empty() || !received_forward_.empty() || !received_backward_.empty() ||
      !to_send_forward_.empty() || !to_send_backward_.empty() || !targets_.empty() ||
      !handed_forward_.empty() || !handed_backward_.empty()) {
    throw std::logic_error("engine: the Program left activations or messages behind");
  }
}

double Engine::forward_backward(std::int64_t step) {
  finish_carried();  // its passes wait for no carried step
  StepResult result;
  result_ = &result;
  std::vector<OpRecord> records;
  begin_step();
  run_pipeline(step, records);
  finish_sends(records);
  backend_->synchronize();
  result_ = nullptr;
  return global_loss();
}

double Engine::evaluate(const data::BatchSampler& sampler, std::int64_t batch) {
  const data::BatchSampler* training = sampler_;
  sampler_ = &sampler;
  try {
    const double loss = forward_backward(batch);
    sampler_ = training;
    return loss;
  } catch (...) {
    sampler_ = training;
    throw;
  }
}

void Engine::run_ops(std::int64_t step, std::vector<OpRecord>& records) {
  stepping_ = true;
  try {
    run_pipeline(step, records);
  } catch (...) {
    stepping_ = false;
    throw;
  }
  stepping_ = false;
  finish_sends(records);
  run_tail(step, records);
}

StepResult Engine::step(std::int64_t step) {
  if (capture_) return captured_step(step);
  StepResult result;
  result.lr = learning_rate(train_.optimizer, step + 1, train_.steps);
  result_ = &result;
  std::vector<OpRecord> records;
  host_world_->barrier();  // a common origin for every rank's trace and step time
  const auto t_start = std::chrono::steady_clock::now();
  begin_step();
  const int origin = backend_->timestamp(Stream::kCompute);
  carried_in_ = std::move(carried_);
  carried_.clear();
  run_ops(step, records);
  if (carried_.empty()) {
    backend_->synchronize();
  } else {
    backend_->synchronize_device();  // the carried host steps run on (program.h, "carried")
  }
  result.loss = global_loss();
  result.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  result_ = nullptr;
  const std::int64_t pp_rank = groups_->coords().pp;
  account(records, origin, pp_rank, result);
  trace_carried(t_start, pp_rank, result.events);
  carried_in_.clear();
  return result;
}

StepResult Engine::captured_step(std::int64_t step) {
  Capture& c = *capture_;
  StepResult result;
  result.lr = learning_rate(train_.optimizer, step + 1, train_.steps);
  result_ = &result;
  host_world_->barrier();
  const auto t_start = std::chrono::steady_clock::now();
  stage_inputs(step, result.lr);
  if (c.captured && !all_free(c.free_blocks, backend_->free_blocks())) {
    // Work between the steps holds a block the graph uses as scratch: capture afresh.
    backend_->drop_graph();
    c.captured = false;
    ++c.recaptures;
  }
  if (!c.captured) {
    // The first step runs the ops at once (the pool's blocks and the libraries' plans are made
    // then); the next is captured, its ops recorded and not yet run.
    const bool capture = c.warm;
    std::vector<OpRecord> records;
    const auto abandon = [&] {
      staged_inputs_ = false;
      result_ = nullptr;
      if (!capture) return;
      try {
        backend_->end_capture();
        backend_->drop_graph();
      } catch (...) {
        // The capture's own failure is the one reported.
      }
    };
    // A CUDA call the capture refused names itself; say what was being done.
    const auto capture_failed = [&](const SystemError& e) {
      return SystemError(fmt::format("--cuda-graphs: capturing step {} as a CUDA graph failed "
                                     "(run without --cuda-graphs to train op by op): {}",
                                     step + 1, e.what()));
    };
    if (capture) backend_->begin_capture();
    try {
      begin_step();
      c.origin = backend_->timestamp(Stream::kCompute);
      backend_->copy_async(c.scalars.data(), c.scalars_staged.data(), c.scalars.bytes(),
                           Stream::kCompute);
      staged_inputs_ = true;
      run_ops(step, records);
      staged_inputs_ = false;
      if (capture) backend_->end_capture();
    } catch (const SystemError& e) {
      abandon();
      if (capture) throw capture_failed(e);
      throw;
    } catch (...) {
      abandon();
      throw;
    }
    if (capture) {
      c.captured = true;
      c.free_blocks = backend_->free_blocks();
    }
    c.records = std::move(records);
    c.warm = true;
  }
  if (c.captured) backend_->launch_graph();
  backend_->synchronize();
  result.loss = global_loss();
  DeviceStepScalars scalars;
  backend_->copy(&scalars, c.scalars.data(), sizeof scalars, Stream::kCompute);
  result.grad_norm = std::sqrt(scalars.grad_sq);
  result.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  result_ = nullptr;
  account(c.records, c.origin, groups_->coords().pp, result);
  return result;
}

void Engine::account(const std::vector<OpRecord>& records, int origin, std::int64_t pp_rank,
                     StepResult& result) {
  // Durations, the trace and the report's split (see the top of this file).
  StepTimeParts& parts = result.parts;
  double pass_inside = 0;  // state moves inside the current pass
  for (std::size_t i = 0; i < records.size(); ++i) {
    const OpRecord& r = records[i];
    const double start = backend_->seconds_between(origin, r.start);
    const double dur = backend_->seconds_between(r.start, r.end);
    if (r.in_pass && r.kind != Kind::kCompute && r.kind != Kind::kRelease) pass_inside += dur;
    switch (r.kind) {
      case Kind::kForward:
      case Kind::kBackward: break;  // below, once its body's moves are summed
      case Kind::kRecvForward:
      case Kind::kRecvBackward: parts.bubble_s += dur; break;
      case Kind::kSendForward:
      case Kind::kSendBackward: parts.pp_comm_s += dur; break;
      case Kind::kSumNormGrads:
      case Kind::kSumKvGrads: parts.tp_comm_s += dur; break;
      case Kind::kGradNorm: parts.optimizer_s += dur; break;
      case Kind::kOptimizerStep: parts.optimizer_s += dur; break;
      default:
        if (is_dp_comm(r.kind)) parts.dp_comm_s += dur;
        if (is_offload(r.kind)) parts.offload_s += dur;
        break;
    }
    if (r.unit == "wait_sends") continue;
    TraceEvent event;
    event.name = to_string(r.kind);
    event.category = op_category(event.name);
    event.tid = stream_tid(pp_rank, r.stream);
    event.start_s = start;
    event.duration_s = dur;
    event.args = Json::object();
    if (r.micro_batch >= 0) event.args["micro_batch"] = r.micro_batch;
    if (r.chunk >= 0) event.args["chunk"] = r.chunk;
    if (!r.unit.empty()) event.args["unit"] = r.unit;
    event.args["op"] = r.op;  // the op's place in the Program (cost_model/checks/path_trace.h)
    if (r.body_op >= 0) event.args["body_op"] = r.body_op;
    if (r.fused_into >= 0) event.args["fused_into"] = r.fused_into;  // timed with that op
    result.events.push_back(std::move(event));
  }
  // The layer ops inside the compute ops, when the backend timed them one by one: on the
  // compute stream's track, where they nest inside the ops that issued them.
  for (const TimedKernel& k : backend_->timed_kernels()) {
    TraceEvent event;
    event.name = k.name;
    event.category = "kernel";
    event.tid = stream_tid(pp_rank, Stream::kCompute);
    event.start_s = backend_->seconds_between(origin, k.start);
    event.duration_s = backend_->seconds_between(k.start, k.end);
    event.args = Json::object();
    result.events.push_back(std::move(event));
  }
  // Passes: their own duration minus what ran inside them and is counted elsewhere.
  for (std::size_t i = 0; i < records.size(); ++i) {
    const OpRecord& r = records[i];
    if (r.kind != Kind::kForward && r.kind != Kind::kBackward) continue;
    // The last step's updates waited for: optimizer time, not this pass's work.
    double carried_wait_s = 0;
    for (const auto& [before, after] : r.carried_waits) {
      carried_wait_s += backend_->seconds_between(before, after);
    }
    double inside = r.tp_s + carried_wait_s;
    parts.optimizer_s += carried_wait_s;
    for (std::size_t j = i + 1; j < records.size() && records[j].in_pass; ++j) {
      // A host step that ran on the host stream's thread took none of the pass's time.
      if (records[j].stream == Stream::kHost && host_apart_) continue;
      if (records[j].kind != Kind::kCompute && records[j].kind != Kind::kRelease) {
        inside += backend_->seconds_between(records[j].start, records[j].end);
      }
    }
    const double dur = backend_->seconds_between(r.start, r.end) - inside;
    (r.kind == Kind::kForward ? parts.forward_s : parts.backward_s) += dur;
  }
  (void)pass_inside;
  parts.tp_comm_s += tp_.comm_seconds();
  parts.offload_s += state_.optimizer_transfer_s();
  parts.optimizer_s -= state_.optimizer_transfer_s();
  result.transfers = state_.transfers();
  // Host AdamW that ran beside the backward (host_apart_) was counted whole; what of it the
  // step did not wait for is hidden, and left out, so that the parts still split the step.
  const double excess = parts.sum() - result.step_s;
  if (host_apart_ && excess > 0 && excess <= parts.optimizer_s) {
    parts.optimizer_s -= excess;
    parts.other_s = 0;  // not step_s - sum: rounding would leave it a hair below zero
  } else {
    parts.other_s = result.step_s - parts.sum();
  }
}

}  // namespace strata::engine
