// ModelState's optimizer (see model_state.h): AdamW on the device over the backend's fused
// launch, or on the host over the offloaded state (streamed tile by tile, NVMe included),
// and ZeRO-1/2's all-gather of the updated slices.
#include <chrono>
#include <functional>
#include <stdexcept>
#include <vector>

#include "cost_model/specs/optimizer_schedule.h"
#include "executor/engine/model_state.h"
#include "executor/offload/cpu_adam_stream.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/elementwise.h"

namespace strata::engine {
namespace cpu = strata::kernels::cpu;

namespace {

template <class F>
void timed(double& seconds, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::int64_t element_bytes(DType t) { return dtype_bytes(t); }

}  // namespace

std::vector<ModelState::DecayRun> ModelState::decay_runs(const ParamUnit& u,
                                                         const OptimizerSpec& opt) const {
  const std::int64_t n = opt_elements(u);
  const std::int64_t off = opt_offset(u);
  // Without weight decay there is nothing to split: one run, the same kernel call as ever.
  if (opt.weight_decay == 0.0) return {{0, n, true}};
  // The part starts at unit element `lo` (stage 3: this rank's shard; stage 1/2: its slice).
  const std::int64_t lo = zero_stage_ == 3 ? groups_->coords().dp * u.shard : off;
  std::vector<DecayRun> runs;
  const auto add = [&runs](std::int64_t b, std::int64_t e, bool decayed) {
    if (b >= e) return;
    if (!runs.empty() && runs.back().decayed == decayed && runs.back().end == b) {
      runs.back().end = e;
    } else {
      runs.push_back({b, e, decayed});
    }
  };
  std::int64_t at = 0;
  for (const auto& s : u.layout.segments) {  // in offset order, back to back
    const std::int64_t b = std::max<std::int64_t>(s.offset - lo, 0);
    const std::int64_t e = std::min<std::int64_t>(s.offset + s.count() - lo, n);
    if (b >= e) continue;
    add(at, b, false);
    add(b, e, decays(opt, s));
    at = e;
  }
  add(at, n, false);  // ZeRO padding: zero parameters with zero gradients
  return runs;
}

AdamWStep adamw_step(const OptimizerSpec& opt, int step, double lr) {
  return {static_cast<float>(lr), static_cast<float>(opt.beta1), static_cast<float>(opt.beta2),
          static_cast<float>(opt.eps), static_cast<float>(opt.weight_decay), step};
}

ModelState::HostStep ModelState::host_optimizer_step(std::size_t u, const OptimizerSpec& opt,
                                                     int step, double lr, bool apart) {
  if (!optimizer_off()) {
    throw std::logic_error("ModelState: a host optimizer step of " + units_.at(u).layout.name +
                           " whose optimizer state is on the device");
  }
  land_pending_down();
  ParamUnit& p = units_.at(u);
  HostStep host;
  host.op = "CPU AdamW of " + p.layout.name;
  if (host_steps_host_only()) {
    const std::int64_t bytes = opt_elements(p) * 4;
    host.touches = {host_reads(p.host_grads.data(), bytes), host_writes(p.host_grads.data(), bytes),
                    host_writes(p.host_params.data(), bytes), host_writes(p.host_m.data(), bytes),
                    host_writes(p.host_v.data(), bytes)};
  }
  // The host shard of offloaded params is the master the step writes: this step's fetches,
  // which read it, must be done first. Read here, on the issuing thread: a step carried into
  // the next (engine.h) runs while that step's begin_step and fetches rewrite the marks.
  int read_mark = params_off() ? p.host_read_mark : -1;
  if (apart) {
    backend_->wait(Stream::kHost, read_mark);
    read_mark = -1;
  }
  host.work = [this, &p, hp = adamw_step(opt, step, lr), runs = decay_runs(p, opt), scale = clip_,
               read_mark] { update_on_cpu(p, hp, runs, scale, read_mark); };
  return host;
}

void ModelState::optimizer_step(const std::vector<std::size_t>& units, const OptimizerSpec& opt,
                                int step, double lr) {
  if (optimizer_off()) {
    // The Program puts an offloaded optimizer's steps on the host stream (program.h).
    throw std::logic_error("ModelState: optimizer_step with the optimizer state offloaded; "
                           "its steps are host_optimizer_step's");
  }
  const AdamWStep hp = adamw_step(opt, step, lr);
  land_pending_down();
  std::vector<AdamWSpan> batch;
  for (std::size_t u : units) {
    update_on_device(units_.at(u), hp, decay_runs(units_.at(u), opt), batch);
  }
  if (batch.empty()) return;
  if (device_scalars_ != nullptr) {
    backend_->adamw_from_device(batch, hp, device_scalars_);
  } else {
    backend_->adamw(batch, hp, clip_);
  }
}

void ModelState::update_on_device(ParamUnit& u, const AdamWStep& hp,
                                  const std::vector<DecayRun>& runs,
                                  std::vector<AdamWSpan>& batch) {
  const std::int64_t n = opt_elements(u);
  const std::int64_t off = opt_offset(u);
  // The gradient part on the device (offloaded gradients come up first).
  Tensor g_up, p_up;
  float* g = nullptr;
  double up_s = 0;
  timed(up_s, [&] {
    if (grads_off()) {
      g_up = alloc(MemoryTier::kDevice, DType::kF32, n, "offload:grad_fetch", false);
      if (offload_.gradients == OffloadTier::kCpu) {
        links_->host_to_device(g_up.f32(), u.host_grads.f32(), n);
      } else {
        Tensor staging = alloc(MemoryTier::kHost, DType::kF32, n, "offload:grad_staging");
        links_->nvme_to_host(u.nvme_grads, staging.f32(), n);
        links_->host_to_device(g_up.f32(), staging.f32(), n);
      }
      g = g_up.f32();
    } else {
      g = zero_stage_ <= 1 ? u.grads.f32() + off : u.grad_shard.f32();
    }
  });
  // The fp32 master: the params themselves (fp32 compute), the kept master, or (offloaded
  // params) the host shard brought up for the step and written back after.
  float* master = nullptr;
  void* copy = nullptr;
  if (params_off()) {
    timed(up_s, [&] {
      p_up = alloc(MemoryTier::kDevice, DType::kF32, n, "offload:param_fetch", false);
      if (offload_.params == OffloadTier::kCpu) {
        links_->host_to_device(p_up.f32(), u.host_params.f32(), n);
      } else {
        Tensor staging = alloc(MemoryTier::kHost, DType::kF32, n, "offload:param_staging");
        links_->nvme_to_host(u.nvme_params, staging.f32(), n);
        links_->host_to_device(p_up.f32(), staging.f32(), n);
      }
    });
    master = p_up.f32();
  } else if (own_master()) {
    master = u.params.f32() + off;
  } else {
    master = u.master.f32();
    copy = u.params.at(off);
  }
  // One tensor per run of equal weight decay (AdamW is element-wise: the same bits as one).
  const std::int64_t cb = element_bytes(backend_->compute_dtype());
  for (const DecayRun& r : runs) {
    void* run_copy = copy == nullptr ? nullptr : static_cast<char*>(copy) + r.begin * cb;
    batch.push_back({master + r.begin, run_copy, g + r.begin, u.m.f32() + r.begin,
                     u.v.f32() + r.begin, r.end - r.begin, r.decayed});
  }
  // Fetched state is written back (or freed) below: its update must be issued first.
  if (grads_off() || params_off()) {
    backend_->adamw(batch, hp, clip_);
    batch.clear();
  }
  if (params_off()) {
    timed(up_s, [&] {
      if (offload_.params == OffloadTier::kCpu) {
        links_->device_to_host(u.host_params.f32(), master, n);
      } else {
        Tensor staging = alloc(MemoryTier::kHost, DType::kF32, n, "offload:param_staging");
        links_->device_to_host(staging.f32(), master, n);
        links_->host_to_nvme(u.nvme_params, staging.f32(), n);
      }
    });
  }
  optimizer_transfer_s_ += up_s;
}

void ModelState::update_on_cpu(ParamUnit& u, const AdamWStep& hp,
                               const std::vector<DecayRun>& runs, float grad_scale,
                               int host_read_mark) {
  const std::int64_t n = opt_elements(u);
  const std::int64_t off = opt_offset(u);
  double up_s = 0;
  // The gradient part in host memory (down from the device unless offloaded already).
  Tensor staging;
  float* g = nullptr;
  if (grads_off() && offload_.gradients == OffloadTier::kCpu) {
    g = u.host_grads.f32();
  } else {
    timed(up_s, [&] {
      staging = alloc(MemoryTier::kHost, DType::kF32, n, "offload:grad_staging");
      g = staging.f32();
      if (grads_off()) {
        links_->nvme_to_host(u.nvme_grads, g, n);
      } else {
        links_->device_to_host(g, zero_stage_ <= 1 ? u.grads.f32() + off : u.grad_shard.f32(), n);
      }
    });
  }
  offload::AdamState state;
  state.n = n;
  const auto array = [](Tensor& host, const std::string& nvme_name) {
    return host.empty() ? offload::StateArray::in_nvme(nvme_name)
                        : offload::StateArray::in_host(host.f32());
  };
  state.param = params_off() ? array(u.host_params, u.nvme_params) : array(u.host_master, u.nvme_master);
  state.m = array(u.host_m, u.nvme_m);
  state.v = array(u.host_v, u.nvme_v);
  // The device copy of the part the optimizer owns (none when the params are offloaded),
  // refreshed tile by tile.
  void* device_part = params_off() ? nullptr : u.params.at(off);
  Tensor tile_up;
  if (device_part != nullptr && !own_master()) {
    tile_up = alloc(MemoryTier::kDevice, DType::kF32, std::min(n, options_.adam_tile_floats),
                    "offload:param_fetch", false);
  }
  const std::int64_t c_bytes = element_bytes(backend_->compute_dtype());
  offload::CpuAdamStream stream(state, options_.adam_tile_floats,
                                links_->has_store() ? &links_->store() : nullptr,
                                &backend_->accounting());
  offload::CpuAdamStream::Ranges no_decay;
  for (const DecayRun& r : runs) {
    if (!r.decayed) no_decay.emplace_back(r.begin, r.end);
  }
  backend_->host_wait_for(host_read_mark);  // host_optimizer_step's
  const auto in_host = [](const offload::StateArray& a) -> void* {
    return a.on_nvme() ? nullptr : a.host;
  };
  backend_->on_host(
      "CPU AdamW of " + u.layout.name,
      {host_reads(g, n * 4), host_writes(g, n * 4), host_writes(in_host(state.param), n * 4),
       host_writes(in_host(state.m), n * 4), host_writes(in_host(state.v), n * 4)},
      [&] {
        if (grad_scale != 1.0f) cpu::scale(g, n, grad_scale);
        stream.step(g, kernels::cpu::AdamWParams{hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay},
                    hp.step, [&](std::int64_t begin, std::int64_t end, const float* param) {
                      if (device_part == nullptr) return;
                      timed(up_s, [&] {
                        void* dst = static_cast<char*>(device_part) + begin * c_bytes;
                        if (own_master()) {
                          links_->host_to_device(static_cast<float*>(dst), param, end - begin);
                        } else {
                          links_->host_to_device(tile_up.f32(), param, end - begin);
                          backend_->to_compute(dst, tile_up.f32(), end - begin);
                        }
                      });
                    }, no_decay);
      });
  // Logical NVMe bytes of the streamed step: each NVMe array read and written once.
  std::int64_t nvme_arrays = 0;
  for (const auto* a : {&state.param, &state.m, &state.v}) nvme_arrays += a->on_nvme() ? 1 : 0;
  // Only where there was something to count: a step carried into the next (all of it in
  // host memory) runs beside that step's own counting.
  if (nvme_arrays > 0) links_->count_nvme(nvme_arrays * n * 4, nvme_arrays * n * 4);
  if (up_s > 0) optimizer_transfer_s_ += up_s;
}

void ModelState::gather_params(std::size_t u) {
  // ZeRO-1/2: every rank updated its slice of the compute copy; all-gather the slices.
  ParamUnit& p = units_.at(u);
  const DType c = backend_->compute_dtype();
  Tensor mine = alloc(MemoryTier::kDevice, c, p.shard, "dp_scratch", false);
  backend_->copy(mine.data(), p.params.at(groups_->coords().dp * p.shard), p.shard * element_bytes(c),
                 Stream::kComm);
  groups_->dp().all_gather(mine.data(), p.params.data(), p.shard, c);
  backend_->release_after(std::move(mine), Stream::kComm);
}

}  // namespace strata::engine
