// Parameters, gradients and AdamW state under ZeRO stages 0-3 (see model_state.h).
#include "executor/engine/model_state.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <stdexcept>

#include "executor/model/param_init.h"
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

}  // namespace

ModelState::ModelState(std::vector<UnitLayout> layouts, int zero_stage,
                       const ProcessGroups& groups, std::uint64_t seed, AccountingAllocator& alloc,
                       const OffloadPlan& offload, const OffloadOptions& options,
                       std::int64_t micro_batches, bool sequence_parallel)
    : zero_stage_(zero_stage),
      groups_(&groups),
      alloc_(&alloc),
      offload_(offload),
      micro_batches_(micro_batches),
      sequence_parallel_(sequence_parallel) {
  if (offload_ != OffloadPlan{}) {
    links_ = std::make_unique<OffloadLinks>(offload_, options, alloc);
    if (params_off()) fetcher_ = std::make_unique<ParamFetcher>(*links_, alloc);
  }
  const std::int64_t d = groups.dims().dp;
  const std::int64_t dp_rank = groups.coords().dp;
  units_.reserve(layouts.size());
  for (auto& layout : layouts) {
    ParamUnit u;
    u.layout = std::move(layout);
    u.padded = (u.layout.count + d - 1) / d * d;
    u.shard = u.padded / d;
    const std::int64_t lo = zero_stage >= 3 ? dp_rank * u.shard : 0;
    const std::int64_t n = zero_stage >= 3 ? u.shard : u.padded;
    if (params_off()) {
      u.host_params = alloc.allocate_floats(MemoryTier::kHost, n, "offload:params");
      model::init_unit_range(u.layout, seed, u.host_params.f32(), lo, lo + n);
    } else {
      u.params = alloc.allocate_floats(MemoryTier::kDevice, n, "params");
      model::init_unit_range(u.layout, seed, u.params.f32(), lo, lo + n);
    }
    if (zero_stage <= 1) u.grads = alloc.allocate_floats(MemoryTier::kDevice, u.padded, "gradients");
    if (zero_stage >= 2 && !grads_off()) {
      u.grad_shard = alloc.allocate_floats(MemoryTier::kDevice, u.shard, "gradients");
    }
    const std::int64_t opt_n = zero_stage >= 1 ? u.shard : u.padded;
    if (!optimizer_off()) {
      u.m = alloc.allocate_floats(MemoryTier::kDevice, opt_n, "optimizer");
      u.v = alloc.allocate_floats(MemoryTier::kDevice, opt_n, "optimizer");
    }
    place_offloaded(u, dp_rank);
    index_[u.layout.name] = units_.size();
    units_.push_back(std::move(u));
  }
}

void ModelState::place_offloaded(ParamUnit& u, std::int64_t dp_rank) {
  if (!links_) return;
  const std::string& name = u.layout.name;
  if (params_off() && offload_.params == OffloadTier::kNvme) {
    u.nvme_params = "params." + name;
    links_->store().create_from(u.nvme_params, u.host_params.f32(), u.shard);
    u.host_params.reset();
  }
  if (grads_off()) {
    if (offload_.gradients == OffloadTier::kCpu) {
      u.host_grads = alloc_->allocate_floats(MemoryTier::kHost, u.shard, "offload:gradients");
    } else {
      u.nvme_grads = "grads." + name;
      links_->store().create(u.nvme_grads, u.shard);
    }
  }
  if (!optimizer_off()) return;
  const std::int64_t opt_n = zero_stage_ >= 1 ? u.shard : u.padded;
  const bool nvme = offload_.optimizer == OffloadTier::kNvme;
  for (auto [host, nvme_name, prefix] :
       {std::tuple{&u.host_m, &u.nvme_m, "adam_m."}, std::tuple{&u.host_v, &u.nvme_v, "adam_v."}}) {
    if (nvme) {
      *nvme_name = prefix + name;
      links_->store().create(*nvme_name, opt_n);
    } else {
      *host = alloc_->allocate_floats(MemoryTier::kHost, opt_n, "offload:optimizer");
    }
  }
  // fp32 master params of the optimizer's part, unless the offloaded params are the master.
  if (params_off()) return;
  const float* part = u.params.f32() + (zero_stage_ == 1 || zero_stage_ == 2 ? dp_rank * u.shard : 0);
  if (nvme) {
    u.nvme_master = "master." + name;
    links_->store().create_from(u.nvme_master, part, opt_n);
  } else {
    u.host_master = alloc_->allocate_floats(MemoryTier::kHost, opt_n, "offload:optimizer");
    cpu::copy(u.host_master.f32(), part, opt_n);
  }
}

ShardSource ModelState::shard_source(const ParamUnit& u) const {
  return ShardSource{u.host_params.empty() ? nullptr : u.host_params.f32(), u.nvme_params, u.shard};
}

void ModelState::reset_times() {
  times_ = {};
  if (links_) links_->reset_bytes();
}

ParamUnit& ModelState::unit(const std::string& name) {
  const auto it = index_.find(name);
  if (it == index_.end()) throw std::out_of_range("ModelState: no unit " + name);
  return units_[it->second];
}

const float* ModelState::acquire(const std::string& name) {
  ParamUnit& u = unit(name);
  if (zero_stage_ < 3) return u.params.f32();
  if (u.acquired++ == 0) {
    u.gathered = alloc_->allocate_floats(MemoryTier::kDevice, u.padded, "zero3_gather");
    Buffer fetched;
    const float* shard = u.params.f32();
    if (params_off()) {
      timed(times_.offload_s, [&] { fetched = fetcher_->take(name, shard_source(u)); });
      shard = fetched.f32();
    }
    timed(times_.dp_comm_s, [&] { groups_->dp().all_gather(shard, u.gathered.f32(), u.shard); });
  }
  return u.gathered.f32();
}

void ModelState::prefetch(const std::string& name) {
  if (!fetcher_) return;
  ParamUnit& u = unit(name);
  if (u.acquired > 0) return;
  timed(times_.offload_s, [&] { fetcher_->prefetch(name, shard_source(u)); });
}

void ModelState::layer_backward_done(const std::string& name) {
  ParamUnit& u = unit(name);
  if (!early_reduce(u)) return;
  Buffer shard = alloc_->allocate_floats(MemoryTier::kDevice, u.shard, "dp_scratch");
  timed(times_.dp_comm_s, [&] {
    groups_->dp().reduce_scatter_sum(grads(name), shard.f32(), u.shard);
    u.grads.reset();
  });
  timed(times_.offload_s, [&] { send_grad_shard_down(u, shard.f32(), micro_batches_); });
}

void ModelState::send_grad_shard_down(ParamUnit& u, const float* shard,
                                      std::int64_t downs_per_step) {
  const bool first = u.grad_downs == 0;
  const bool last = ++u.grad_downs == downs_per_step;
  const std::int64_t n = u.shard;
  if (offload_.gradients == OffloadTier::kCpu) {
    if (first) {
      links_->device_to_host(u.host_grads.f32(), shard, n);
    } else {
      Buffer down = alloc_->allocate_floats(MemoryTier::kHost, n, "offload:grad_staging");
      links_->device_to_host(down.f32(), shard, n);
      cpu::accumulate(u.host_grads.f32(), down.f32(), n);
    }
    return;
  }
  // NVMe: accumulated in place (read, add, write); the norm's share taken once final.
  Buffer down = alloc_->allocate_floats(MemoryTier::kHost, n, "offload:grad_staging");
  links_->device_to_host(down.f32(), shard, n);
  Buffer acc;
  if (!first) {
    acc = alloc_->allocate_floats(MemoryTier::kHost, n, "offload:grad_staging");
    links_->nvme_to_host(u.nvme_grads, acc.f32(), n);
    cpu::accumulate(acc.f32(), down.f32(), n);
  }
  const float* total = first ? down.f32() : acc.f32();
  if (last) u.grad_sq = local_sum_of_squares(u, total, groups_->coords().dp * u.shard);
  links_->host_to_nvme(u.nvme_grads, total, n);
}

void ModelState::release(const std::string& name) {
  ParamUnit& u = unit(name);
  if (zero_stage_ < 3) return;
  if (u.acquired <= 0) throw std::logic_error("ModelState: release without acquire of " + name);
  if (--u.acquired == 0) u.gathered.reset();
}

float* ModelState::grads(const std::string& name) {
  ParamUnit& u = unit(name);
  if (u.grads.empty()) u.grads = alloc_->allocate_floats(MemoryTier::kDevice, u.padded, "gradients");
  return u.grads.f32();
}

void ModelState::zero_grads() {
  for (auto& u : units_) {
    if (!u.grads.empty()) cpu::zero(u.grads.f32(), u.padded);
    u.grad_downs = 0;
  }
}

double ModelState::local_sum_of_squares(const ParamUnit& u, const float* slice,
                                        std::int64_t lo) const {
  // The tied copy equals the embedding's wte after the embedding-group sum: counted there.
  if (u.layout.kind == UnitKind::kTiedCopy) return 0.0;
  const bool tp_leader = groups_->coords().tp == 0;
  const std::int64_t hi = lo + u.shard;
  double sum = 0;
  for (const auto& s : u.layout.segments) {
    if (s.tp_replicated && !tp_leader) continue;
    const std::int64_t a = std::max(lo, s.offset);
    const std::int64_t b = std::min(hi, s.offset + s.count());
    if (a < b) sum += cpu::sum_of_squares(slice + (a - lo), b - a);
  }
  return sum;
}

double ModelState::reduce_and_update(const OptimizerSpec& opt, int step, Communicator& world) {
  const ParallelDims& dims = groups_->dims();
  const std::int64_t dp_rank = groups_->coords().dp;
  // 1. Tied embedding: the first stage's wte and the last stage's copy get the sum of both
  //    gradients (the same n on both sides: the wte shard).
  timed(times_.dp_comm_s, [&] {
    if (dims.pp > 1 && groups_->embedding() != nullptr) {
      for (auto& u : units_) {
        if (u.layout.kind != UnitKind::kEmbedding &&
            u.layout.kind != UnitKind::kTiedCopy) {
          continue;
        }
        const auto& wte = u.layout.segment("wte");
        groups_->embedding()->all_reduce_sum(grads(u.layout.name) + wte.offset, wte.count());
      }
    }
  });
  // 2. Data parallel: all-reduce (stage 0/1) or reduce-scatter into the shard (2/3); offloaded
  //    gradients of layers went down during the backwards already.
  for (auto& u : units_) {
    if (early_reduce(u)) {
      if (u.grad_downs != micro_batches_) {
        throw std::logic_error(fmt::format("ModelState: {} sent {} gradient shards down, expected "
                                           "one per micro-batch ({})",
                                           u.layout.name, u.grad_downs, micro_batches_));
      }
      continue;
    }
    float* g = grads(u.layout.name);
    if (zero_stage_ <= 1) {
      timed(times_.dp_comm_s, [&] { groups_->dp().all_reduce_sum(g, u.padded); });
    } else if (grads_off()) {
      Buffer shard = alloc_->allocate_floats(MemoryTier::kDevice, u.shard, "dp_scratch");
      timed(times_.dp_comm_s, [&] {
        groups_->dp().reduce_scatter_sum(g, shard.f32(), u.shard);
        u.grads.reset();
      });
      timed(times_.offload_s, [&] { send_grad_shard_down(u, shard.f32(), 1); });
    } else {
      timed(times_.dp_comm_s, [&] {
        groups_->dp().reduce_scatter_sum(g, u.grad_shard.f32(), u.shard);
        u.grads.reset();
      });
    }
  }
  // 3. Global norm: every rank sums its slices, the world sum counts each parameter once.
  double norm = 0;
  timed(times_.optimizer_s, [&] {
    double sq = 0;
    for (auto& u : units_) {
      if (grads_off() && offload_.gradients == OffloadTier::kNvme) {
        sq += u.grad_sq;  // taken when the shard was final (send_grad_shard_down)
      } else {
        sq += local_sum_of_squares(u, grad_slice(u), dp_rank * u.shard);
      }
    }
    world.all_reduce_sum(&sq, 1);
    norm = std::sqrt(sq);
  });
  const float clip = cpu::clip_scale(norm, static_cast<float>(opt.grad_clip));
  const cpu::AdamWParams hp{static_cast<float>(opt.lr), static_cast<float>(opt.beta1),
                            static_cast<float>(opt.beta2), static_cast<float>(opt.eps),
                            static_cast<float>(opt.weight_decay)};
  // 4. AdamW on this rank's part, then (stage 1/2) the updated slices all-gathered.
  for (auto& u : units_) {
    update_unit(u, hp, step, clip);
    if (zero_stage_ == 1 || zero_stage_ == 2) {
      timed(times_.dp_comm_s, [&] {
        Buffer mine = alloc_->allocate_floats(MemoryTier::kDevice, u.shard, "dp_scratch");
        cpu::copy(mine.f32(), u.params.f32() + dp_rank * u.shard, u.shard);
        groups_->dp().all_gather(mine.f32(), u.params.f32(), u.shard);
      });
    }
  }
  return norm;
}

float* ModelState::grad_slice(ParamUnit& u) {
  // This rank's reduced gradient slice of the unit: [dp_rank * shard, +shard).
  if (zero_stage_ <= 1) return u.grads.f32() + groups_->coords().dp * u.shard;
  if (grads_off()) return u.host_grads.f32();  // cpu; nvme has no resident slice
  return u.grad_shard.f32();
}

void ModelState::update_unit(ParamUnit& u, const cpu::AdamWParams& hp, int step, float clip) {
  if (optimizer_off()) {
    update_on_cpu(u, hp, step, clip);
    return;
  }
  const std::int64_t dp_rank = groups_->coords().dp;
  if (zero_stage_ == 0) {
    timed(times_.optimizer_s, [&] {
      if (clip != 1.0f) cpu::scale(u.grads.f32(), u.padded, clip);
      cpu::adamw_update(u.params.f32(), u.grads.f32(), u.m.f32(), u.v.f32(), u.padded, hp, step);
    });
    return;
  }
  const std::int64_t n = u.shard;
  // Offloaded gradients / params come up for the device optimizer (params go back after).
  Buffer g_up, p_up, staging;
  float* g = nullptr;
  float* p = nullptr;
  timed(times_.offload_s, [&] {
    if (grads_off()) {
      g_up = alloc_->allocate_floats(MemoryTier::kDevice, n, "offload:grad_fetch");
      if (offload_.gradients == OffloadTier::kCpu) {
        links_->host_to_device(g_up.f32(), u.host_grads.f32(), n);
      } else {
        staging = alloc_->allocate_floats(MemoryTier::kHost, n, "offload:grad_staging");
        links_->nvme_to_host(u.nvme_grads, staging.f32(), n);
        links_->host_to_device(g_up.f32(), staging.f32(), n);
      }
      g = g_up.f32();
    } else {
      g = grad_slice(u);
    }
    if (params_off()) {
      p_up = alloc_->allocate_floats(MemoryTier::kDevice, n, "offload:param_fetch");
      if (offload_.params == OffloadTier::kCpu) {
        links_->host_to_device(p_up.f32(), u.host_params.f32(), n);
      } else {
        staging = alloc_->allocate_floats(MemoryTier::kHost, n, "offload:param_staging");
        links_->nvme_to_host(u.nvme_params, staging.f32(), n);
        links_->host_to_device(p_up.f32(), staging.f32(), n);
      }
      p = p_up.f32();
    } else {
      p = zero_stage_ >= 3 ? u.params.f32() : u.params.f32() + dp_rank * n;
    }
  });
  timed(times_.optimizer_s, [&] {
    if (clip != 1.0f) cpu::scale(g, n, clip);
    cpu::adamw_update(p, g, u.m.f32(), u.v.f32(), n, hp, step);
  });
  if (!params_off()) return;
  timed(times_.offload_s, [&] {
    if (offload_.params == OffloadTier::kCpu) {
      links_->device_to_host(u.host_params.f32(), p, n);
    } else {
      links_->device_to_host(staging.f32(), p, n);
      links_->host_to_nvme(u.nvme_params, staging.f32(), n);
    }
  });
}

void ModelState::update_on_cpu(ParamUnit& u, const cpu::AdamWParams& hp, int step, float clip) {
  const std::int64_t dp_rank = groups_->coords().dp;
  const std::int64_t n = zero_stage_ >= 1 ? u.shard : u.padded;
  // The gradient part in host memory (down from the device unless offloaded already).
  Buffer staging;
  float* g = nullptr;
  timed(times_.offload_s, [&] {
    if (grads_off() && offload_.gradients == OffloadTier::kCpu) {
      g = u.host_grads.f32();
      return;
    }
    staging = alloc_->allocate_floats(MemoryTier::kHost, n, "offload:grad_staging");
    g = staging.f32();
    if (grads_off()) {
      links_->nvme_to_host(u.nvme_grads, g, n);
    } else {
      links_->device_to_host(g, zero_stage_ == 0 ? u.grads.f32() : grad_slice(u), n);
    }
  });
  offload::AdamState state;
  state.n = n;
  const auto array = [](Buffer& host, const std::string& nvme_name) {
    return host.empty() ? offload::StateArray::in_nvme(nvme_name)
                        : offload::StateArray::in_host(host.f32());
  };
  state.param = params_off() ? array(u.host_params, u.nvme_params) : array(u.host_master, u.nvme_master);
  state.m = array(u.host_m, u.nvme_m);
  state.v = array(u.host_v, u.nvme_v);
  // The device copy of the part the optimizer owns (none when the params are offloaded).
  float* device_part = nullptr;
  if (!params_off()) {
    device_part = u.params.f32() + (zero_stage_ == 1 || zero_stage_ == 2 ? dp_rank * u.shard : 0);
  }
  double up_s = 0;
  timed(times_.optimizer_s, [&] {
    if (clip != 1.0f) cpu::scale(g, n, clip);
    offload::CpuAdamStream stream(state, links_->options().adam_tile_floats,
                                  links_->has_store() ? &links_->store() : nullptr, alloc_);
    stream.step(g, hp, step, [&](std::int64_t begin, std::int64_t end, const float* param) {
      if (device_part != nullptr) timed(up_s, [&] { links_->host_to_device(device_part + begin, param, end - begin); });
    });
  });
  // Logical NVMe bytes of the streamed step: each NVMe array read and written once.
  std::int64_t nvme_arrays = 0;
  for (const auto* a : {&state.param, &state.m, &state.v}) nvme_arrays += a->on_nvme() ? 1 : 0;
  links_->count_nvme(nvme_arrays * n * 4, nvme_arrays * n * 4);
  times_.optimizer_s -= up_s;
  times_.offload_s += up_s;
}

std::vector<float> ModelState::full_params(const std::string& name) {
  const float* p = acquire(name);
  const ParamUnit& u = unit(name);
  std::vector<float> out(p, p + u.layout.count);
  release(name);
  return out;
}

}  // namespace strata::engine
