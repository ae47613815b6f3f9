#include "executor/cuda/cuda_engine.h"

#include <chrono>
#include <stdexcept>

#include <fmt/format.h>

#include "cost_model/chrome_trace.h"
#include "cost_model/errors.h"
#include "executor/cuda/system_error.h"
#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {
namespace {

using Clock = std::chrono::steady_clock;

GptShape shape_of(const ModelSpec& model, const Plan& plan) {
  GptShape s;
  s.B = static_cast<int>(plan.micro_batch);
  s.T = static_cast<int>(model.seq_len);
  s.C = static_cast<int>(model.hidden);
  s.NH = static_cast<int>(model.heads);
  s.F = static_cast<int>(model.ffn_hidden);
  s.V = static_cast<int>(model.vocab);
  s.Vp = (s.V + kVocabAlignment - 1) / kVocabAlignment * kVocabAlignment;
  return s;
}

// The single-rank units with wte padded to Vp rows (see GptShape): the padding rows are
// marked invalid, so they initialise to zero and every real row keeps its CPU-backend value.
std::vector<UnitLayout> padded_units(const ModelSpec& model, const Plan& plan) {
  ModelSpec padded = model;
  padded.vocab = shape_of(model, plan).Vp;
  std::vector<UnitLayout> units = engine::rank_layouts(padded, plan, RankCoords{});
  for (auto& unit : units) {
    for (auto& segment : unit.segments) {
      if (segment.name == "wte") segment.valid_rows = model.vocab;
    }
  }
  return units;
}

}  // namespace

void CudaEngine::check_supported(const ModelSpec& model, const Plan& plan) {
  if (plan.world_size() != 1) {
    throw ConfigError(fmt::format(
        "plan {}: the CUDA backend runs one GPU (tp = pp = dp = 1) in this version; this plan "
        "needs {} ranks (use --backend cpu)", plan.label(), plan.world_size()));
  }
  const OffloadPlan none{};
  if (!(plan.offload == none)) {
    throw ConfigError(fmt::format("plan {}: offload is not implemented on the CUDA backend yet "
                                  "(use --backend cpu)", plan.label()));
  }
  if (plan.sequence_parallel) {
    throw ConfigError(fmt::format("plan {}: sequence_parallel needs tp > 1", plan.label()));
  }
  const std::int64_t head_size = model.hidden / model.heads;
  if (head_size != 64 && head_size != 128) {
    throw ConfigError(fmt::format(
        "model {}: hidden / heads = {} / {} = {}; the CUDA attention kernel supports head size "
        "64 or 128", model.name, model.hidden, model.heads, head_size));
  }
  if (model.hidden % 8 != 0 || model.ffn_hidden % 8 != 0) {
    throw ConfigError(fmt::format("model {}: hidden = {} and ffn_hidden = {} must be multiples "
                                  "of 8 (16-byte aligned bf16 rows)", model.name, model.hidden,
                                  model.ffn_hidden));
  }
}

CudaEngine::CudaEngine(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                       DevicePool& pool, const data::BatchSampler& sampler)
    : model_(model),
      train_(train),
      plan_(plan),
      pool_(&pool),
      sampler_(&sampler),
      stream_(pool.stream()),
      shape_(shape_of(model, plan)),
      schedule_(make_schedule(plan.schedule, 1, plan.virtual_stages, plan.micro_batches(train))),
      params_((check_supported(model, plan), padded_units(model, plan)),
              train.seed, pool, pool.stream()),
      kernels_(shape_, pool, pool.stream()) {
  if (train.precision != Precision::kBf16) {
    throw ConfigError(fmt::format("train precision {}: the CUDA backend trains in bf16 mixed "
                                  "precision (fp32 master weights); set \"precision\": \"bf16\"",
                                  to_string(train.precision)));
  }
  const std::int64_t v = plan.virtual_stages;
  const std::int64_t per_chunk = model.layers / v;
  for (std::int64_t c = 0; c < v; ++c) {
    chunks_.push_back({c * per_chunk, per_chunk, c == 0, c == v - 1});
  }
  const std::int64_t m = schedule_.micro_batches;
  const std::int64_t bt = shape_.BT();
  global_tokens_ = static_cast<double>(train.global_batch) * static_cast<double>(model.seq_len);
  tokens_ = pool.allocate(m * bt * 4, "data");
  targets_ = pool.allocate(m * bt * 4, "data");
  losses_ = pool.allocate(m * bt * 4, "losses");
  dlosses_ = pool.allocate(bt * 4, "losses");
  const std::vector<float> scale(static_cast<std::size_t>(bt),
                                 static_cast<float>(1.0 / global_tokens_));
  as_system_error([&] {
    CUDA_CHECK(cudaMemcpyAsync(dlosses_.data(), scale.data(), scale.size() * sizeof(float),
                               cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    const std::size_t ops = schedule_.ops[0].size();
    for (std::size_t i = 0; i < ops; ++i) {
      timings_.push_back({kernels::cuda::Event::create(), kernels::cuda::Event::create()});
    }
    step_start_ = kernels::cuda::Event::create();
    optimizer_end_ = kernels::cuda::Event::create();
  });
}

void CudaEngine::load_micro_batch(std::int64_t step, std::int64_t mb) {
  const std::int64_t bt = shape_.BT();
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(bt)), targets(inputs.size());
  sampler_->micro_batch(step, train_.global_batch, 1, 0, mb, plan_.micro_batch, inputs.data(),
                        targets.data());
  as_system_error([&] {
    // Pageable sources: cudaMemcpyAsync returns once the bytes are staged, so the vectors
    // may go out of scope right after.
    CUDA_CHECK(cudaMemcpyAsync(tokens_.as<std::int32_t>() + mb * bt, inputs.data(), bt * 4,
                               cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(targets_.as<std::int32_t>() + mb * bt, targets.data(), bt * 4,
                               cudaMemcpyHostToDevice, stream_));
  });
}

void CudaEngine::forward(std::int64_t mb, std::int64_t chunk) {
  const Chunk& info = chunks_[static_cast<std::size_t>(chunk)];
  Saved& s = saved_[{mb, chunk}];
  const std::int64_t n = shape_.act();
  const std::int64_t bt = shape_.BT();
  if (info.first) {
    DeviceBlock x = kernels_.bf16s(n, "act/ln1_in");
    embedding_forward(kernels_, params_.weight("embedding", "wte"),
                      params_.weight("embedding", "wpe"), tokens_.as<std::int32_t>() + mb * bt,
                      x.as<bf16>());
    s.inputs.push_back(std::move(x));
  } else {
    const auto it = handed_forward_.find({mb, chunk});
    if (it == handed_forward_.end()) {
      throw std::logic_error(fmt::format("cuda engine: forward of ({}, {}) before its input", mb, chunk));
    }
    s.inputs.push_back(std::move(it->second));
    handed_forward_.erase(it);
  }
  s.layers.resize(static_cast<std::size_t>(info.layers));
  for (std::int64_t i = 0; i < info.layers; ++i) {
    const char* tag = i + 1 < info.layers ? "act/ln1_in" : (info.last ? "act/lnf_in" : "pipeline_send");
    DeviceBlock y = kernels_.bf16s(n, tag);
    LayerSaved& saved = s.layers[static_cast<std::size_t>(i)];
    layer_forward(kernels_, params_.layer_weights(layer_unit(info.first_layer + i)),
                  s.inputs.back().as<bf16>(), y.as<bf16>(), saved);
    if (plan_.recompute == Recompute::kFull) saved = {};  // rebuilt before the backward
    s.inputs.push_back(std::move(y));
  }
  if (info.last) {
    head_forward(kernels_, s.inputs.back().as<bf16>(), params_.weight("final_norm", "lnf_w"),
                 params_.weight("final_norm", "lnf_b"), params_.weight("embedding", "wte"),
                 params_.grad("embedding", "wte"), targets_.as<std::int32_t>() + mb * bt,
                 dlosses_.as<float>(), losses_.as<float>() + mb * bt, s.head);
  } else {
    handed_forward_[{mb, chunk + 1}] = std::move(s.inputs.back());
    s.inputs.pop_back();
  }
}

void CudaEngine::backward(std::int64_t mb, std::int64_t chunk) {
  const Chunk& info = chunks_[static_cast<std::size_t>(chunk)];
  const auto it = saved_.find({mb, chunk});
  if (it == saved_.end()) {
    throw std::logic_error(fmt::format("cuda engine: backward of ({}, {}) before its forward", mb, chunk));
  }
  Saved& s = it->second;
  const std::int64_t n = shape_.act();
  DeviceBlock dres;
  if (info.last) {
    dres = kernels_.bf16s(n, "backward_scratch");
    head_backward(kernels_, s.inputs.back().as<bf16>(), params_.weight("final_norm", "lnf_w"),
                  params_.grad("final_norm", "lnf_w"), params_.grad("final_norm", "lnf_b"),
                  s.head, dres.as<bf16>());
    s.inputs.pop_back();
  } else {
    const auto r = handed_backward_.find({mb, chunk});
    if (r == handed_backward_.end()) {
      throw std::logic_error(fmt::format("cuda engine: backward of ({}, {}) before its gradient", mb, chunk));
    }
    dres = std::move(r->second);
    handed_backward_.erase(r);
  }
  for (std::int64_t i = info.layers - 1; i >= 0; --i) {
    const std::string unit = layer_unit(info.first_layer + i);
    const LayerWeights w = params_.layer_weights(unit);
    const bf16* x = s.inputs[static_cast<std::size_t>(i)].as<bf16>();
    LayerSaved& saved = s.layers[static_cast<std::size_t>(i)];
    if (saved.empty()) {  // full recomputation: the same kernels on the same input
      DeviceBlock y = kernels_.bf16s(n, "backward_scratch");
      layer_forward(kernels_, w, x, y.as<bf16>(), saved);
    }
    layer_backward(kernels_, w, params_.layer_grads(unit), x, saved, dres.as<bf16>());
    s.inputs.pop_back();
  }
  if (info.first) {
    embedding_backward(kernels_, params_.grad("embedding", "wte"),
                       params_.grad("embedding", "wpe"), dres.as<bf16>(),
                       tokens_.as<std::int32_t>() + mb * shape_.BT());
  } else {
    handed_backward_[{mb, chunk - 1}] = std::move(dres);
  }
  saved_.erase(it);
}

engine::StepResult CudaEngine::step(std::int64_t step) {
  engine::StepResult result;
  as_system_error([&] { CUDA_CHECK(cudaStreamSynchronize(stream_)); });
  const auto t0 = Clock::now();
  step_start_.record(stream_);
  params_.zero_grads(stream_);
  const std::int64_t m = schedule_.micro_batches;
  for (std::int64_t mb = 0; mb < m; ++mb) load_micro_batch(step, mb);
  const auto& ops = schedule_.ops[0];
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const PipelineOp& op = ops[i];
    timings_[i].start.record(stream_);
    const Key key{op.micro_batch, op.chunk};
    switch (op.kind) {
      case OpKind::kForward: forward(op.micro_batch, op.chunk); break;
      case OpKind::kBackward: backward(op.micro_batch, op.chunk); break;
      // One pipeline rank: forward() and backward() already handed the buffers over; the
      // schedule's send/receive pairs only check the order.
      case OpKind::kSendForward:
      case OpKind::kRecvForward:
        if (handed_forward_.count(op.kind == OpKind::kSendForward
                                      ? Key{op.micro_batch, op.chunk + 1} : key) == 0) {
          throw std::logic_error(fmt::format("cuda engine: {} of ({}, {}) with nothing handed over",
                                             to_string(op.kind), op.micro_batch, op.chunk));
        }
        break;
      case OpKind::kSendBackward:
      case OpKind::kRecvBackward:
        if (handed_backward_.count(op.kind == OpKind::kSendBackward
                                       ? Key{op.micro_batch, op.chunk - 1} : key) == 0) {
          throw std::logic_error(fmt::format("cuda engine: {} of ({}, {}) with nothing handed over",
                                             to_string(op.kind), op.micro_batch, op.chunk));
        }
        break;
    }
    timings_[i].end.record(stream_);
  }
  if (!saved_.empty() || !handed_forward_.empty() || !handed_backward_.empty()) {
    throw std::logic_error("cuda engine: the schedule left activations behind");
  }
  result.grad_norm = params_.clip_and_update(train_.optimizer, static_cast<int>(step + 1), stream_);
  optimizer_end_.record(stream_);
  std::vector<float> losses(static_cast<std::size_t>(m * shape_.BT()));
  as_system_error([&] {
    CUDA_CHECK(cudaMemcpyAsync(losses.data(), losses_.data(), losses.size() * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  });
  result.step_s = std::chrono::duration<double>(Clock::now() - t0).count();
  double sum = 0;
  for (float l : losses) sum += l;  // fixed order: the same bits on every run
  result.loss = sum / global_tokens_;

  auto& parts = result.parts;
  double last_end_s = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const double start_s = timings_[i].start.elapsed_ms_since(step_start_) * 1e-3;
    const double dur_s = timings_[i].end.elapsed_ms_since(timings_[i].start) * 1e-3;
    last_end_s = start_s + dur_s;
    const std::string name = to_string(ops[i].kind);
    if (ops[i].kind == OpKind::kForward) parts.forward_s += dur_s;
    else if (ops[i].kind == OpKind::kBackward) parts.backward_s += dur_s;
    else continue;  // hand-overs take no time
    TraceEvent event;
    event.name = name;
    event.category = op_category(name);
    event.tid = compute_tid(0);
    event.start_s = start_s;
    event.duration_s = dur_s;
    event.args = Json{{"micro_batch", ops[i].micro_batch}, {"chunk", ops[i].chunk}};
    result.events.push_back(std::move(event));
  }
  const double optimizer_s = optimizer_end_.elapsed_ms_since(timings_.back().end) * 1e-3;
  parts.optimizer_s = optimizer_s;
  TraceEvent tail;
  tail.name = "optimizer_step";
  tail.category = op_category(tail.name);
  tail.tid = compute_tid(0);
  tail.start_s = last_end_s;
  tail.duration_s = optimizer_s;
  result.events.push_back(std::move(tail));
  parts.other_s = result.step_s - parts.sum();
  return result;
}

}  // namespace strata::cuda
