// Parameters, gradients and AdamW state under ZeRO stages 0-3 (see model_state.h).
#include "executor/engine/model_state.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <stdexcept>

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

ModelState::ModelState(std::vector<model::UnitLayout> layouts, int zero_stage,
                       const ProcessGroups& groups, std::uint64_t seed, AccountingAllocator& alloc)
    : zero_stage_(zero_stage), groups_(&groups), alloc_(&alloc) {
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
    u.params = alloc.allocate_floats(MemoryTier::kDevice, n, "params");
    model::init_unit_range(u.layout, seed, u.params.f32(), lo, lo + n);
    if (zero_stage <= 1) u.grads = alloc.allocate_floats(MemoryTier::kDevice, u.padded, "gradients");
    if (zero_stage >= 2) {
      u.grad_shard = alloc.allocate_floats(MemoryTier::kDevice, u.shard, "gradients");
    }
    const std::int64_t opt_n = zero_stage >= 1 ? u.shard : u.padded;
    u.m = alloc.allocate_floats(MemoryTier::kDevice, opt_n, "optimizer");
    u.v = alloc.allocate_floats(MemoryTier::kDevice, opt_n, "optimizer");
    index_[u.layout.name] = units_.size();
    units_.push_back(std::move(u));
  }
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
    timed(times_.dp_comm_s,
          [&] { groups_->dp().all_gather(u.params.f32(), u.gathered.f32(), u.shard); });
  }
  return u.gathered.f32();
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
  }
}

double ModelState::local_sum_of_squares(const ParamUnit& u, const float* slice,
                                        std::int64_t lo) const {
  // The tied copy equals the embedding's wte after the embedding-group sum: counted there.
  if (u.layout.kind == model::UnitKind::kTiedCopy) return 0.0;
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
        if (u.layout.kind != model::UnitKind::kEmbedding &&
            u.layout.kind != model::UnitKind::kTiedCopy) {
          continue;
        }
        const auto& wte = u.layout.segment("wte");
        groups_->embedding()->all_reduce_sum(grads(u.layout.name) + wte.offset, wte.count());
      }
    }
    // 2. Data parallel: all-reduce (stage 0/1) or reduce-scatter into the shard (2/3).
    for (auto& u : units_) {
      float* g = grads(u.layout.name);
      if (zero_stage_ <= 1) {
        groups_->dp().all_reduce_sum(g, u.padded);
      } else {
        groups_->dp().reduce_scatter_sum(g, u.grad_shard.f32(), u.shard);
        u.grads.reset();
      }
    }
  });
  // This rank's reduced gradient slice of each unit: [dp_rank * shard, +shard).
  const auto slice_of = [&](ParamUnit& u) {
    return zero_stage_ <= 1 ? u.grads.f32() + dp_rank * u.shard : u.grad_shard.f32();
  };
  // 3. Global norm: every rank sums its slices, the world sum counts each parameter once.
  double norm = 0;
  timed(times_.optimizer_s, [&] {
    double sq = 0;
    for (auto& u : units_) sq += local_sum_of_squares(u, slice_of(u), dp_rank * u.shard);
    world.all_reduce_sum(&sq, 1);
    norm = std::sqrt(sq);
  });
  const float clip = cpu::clip_scale(norm, static_cast<float>(opt.grad_clip));
  const cpu::AdamWParams hp{static_cast<float>(opt.lr), static_cast<float>(opt.beta1),
                            static_cast<float>(opt.beta2), static_cast<float>(opt.eps),
                            static_cast<float>(opt.weight_decay)};
  // 4. AdamW on this rank's part, then (stage 1/2) the updated slices all-gathered.
  for (auto& u : units_) {
    timed(times_.optimizer_s, [&] {
      if (zero_stage_ == 0) {
        if (clip != 1.0f) cpu::scale(u.grads.f32(), u.padded, clip);
        cpu::adamw_update(u.params.f32(), u.grads.f32(), u.m.f32(), u.v.f32(), u.padded, hp, step);
        return;
      }
      float* g = slice_of(u);
      if (clip != 1.0f) cpu::scale(g, u.shard, clip);
      float* p = zero_stage_ >= 3 ? u.params.f32() : u.params.f32() + dp_rank * u.shard;
      cpu::adamw_update(p, g, u.m.f32(), u.v.f32(), u.shard, hp, step);
    });
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

std::vector<float> ModelState::full_params(const std::string& name) {
  const float* p = acquire(name);
  const ParamUnit& u = unit(name);
  std::vector<float> out(p, p + u.layout.count);
  release(name);
  return out;
}

}  // namespace strata::engine
