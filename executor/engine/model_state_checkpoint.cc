// ModelState's checkpoint access (see model_state.h): a unit's full fp32 values gathered
// from wherever the plan keeps them, and this rank's optimizer part read and written.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "executor/engine/model_state.h"
#include "kernels/cpu/elementwise.h"

namespace strata::engine {
namespace cpu = strata::kernels::cpu;

std::vector<float> ModelState::full_params(const std::string& name) {
  const std::int32_t found = index(name);
  if (found < 0) throw std::logic_error("ModelState::full_params: no unit named " + name);
  const std::size_t u = static_cast<std::size_t>(found);
  ParamUnit& p = units_.at(u);
  std::vector<float> out(static_cast<std::size_t>(p.layout.count));
  // The fp32 values: the compute copy when it is its own master, ...
  if (own_master()) {
    if (zero_stage_ == 3 && params_off()) fetch(u);
    if (zero_stage_ == 3) gather(u);
    backend_->copy(out.data(), weights(u), p.layout.count * 4, Stream::kCompute);
    if (zero_stage_ == 3) release(u);
    return out;
  }
  // ... else the master of every DP rank's optimizer part, wherever the plan keeps it
  // (device, host or NVMe), all-gathered where ZeRO splits it.
  const std::vector<float> part = read_part(u, StateKind::kParams);
  if (zero_stage_ == 0) {
    std::copy_n(part.begin(), p.layout.count, out.begin());
    return out;
  }
  Tensor mine = alloc(MemoryTier::kDevice, DType::kF32, p.shard, "dp_scratch", false);
  Tensor full = alloc(MemoryTier::kDevice, DType::kF32, p.padded, "dp_scratch", false);
  backend_->copy(mine.data(), part.data(), p.shard * 4, Stream::kCompute);
  groups_->dp().all_gather(mine.data(), full.data(), p.shard, DType::kF32);
  backend_->synchronize();
  backend_->copy(out.data(), full.data(), p.layout.count * 4, Stream::kCompute);
  return out;
}

ModelState::Part ModelState::optimizer_part(std::size_t u) const {
  const ParamUnit& p = units_.at(u);
  if (zero_stage_ == 0) return {0, p.padded};
  const std::int64_t lo = groups_->coords().dp * p.shard;
  return {lo, lo + p.shard};
}

std::vector<float> ModelState::read_part(std::size_t u, StateKind kind) {
  ParamUnit& p = units_.at(u);
  const std::int64_t n = opt_elements(p);
  std::vector<float> out(static_cast<std::size_t>(n));
  const auto from_tiers = [&](const Tensor& host, const std::string& nvme) {
    if (!nvme.empty()) {
      links_->store().read(nvme, out.data(), n);
    } else {
      cpu::copy(out.data(), host.f32(), n);
    }
  };
  const auto from_device = [&](const void* src) {
    backend_->synchronize();  // the step's last writes to it are done
    backend_->copy(out.data(), src, n * 4, Stream::kCompute);
    backend_->synchronize();
  };
  switch (kind) {
    case StateKind::kAdamM:
      if (optimizer_off()) from_tiers(p.host_m, p.nvme_m); else from_device(p.m.data());
      break;
    case StateKind::kAdamV:
      if (optimizer_off()) from_tiers(p.host_v, p.nvme_v); else from_device(p.v.data());
      break;
    case StateKind::kParams:
      // The fp32 master wherever it lives (the same precedence as update_on_*).
      if (params_off()) {
        from_tiers(p.host_params, p.nvme_params);
      } else if (optimizer_off()) {
        from_tiers(p.host_master, p.nvme_master);
      } else if (own_master()) {
        from_device(p.params.at(opt_offset(p)));
      } else {
        from_device(p.master.data());
      }
      break;
  }
  return out;
}

void ModelState::write_moments(std::size_t u, const std::vector<float>& m,
                               const std::vector<float>& v) {
  ParamUnit& p = units_.at(u);
  const std::int64_t n = opt_elements(p);
  if (static_cast<std::int64_t>(m.size()) != n || static_cast<std::int64_t>(v.size()) != n) {
    throw std::logic_error("ModelState::write_moments: wrong part size for " + p.layout.name);
  }
  for (auto [values, device, host, nvme] : {std::tuple{&m, &p.m, &p.host_m, &p.nvme_m},
                                            std::tuple{&v, &p.v, &p.host_v, &p.nvme_v}}) {
    if (!optimizer_off()) {
      backend_->copy(device->data(), values->data(), n * 4, Stream::kCompute);
    } else if (!nvme->empty()) {
      links_->store().write(*nvme, values->data(), n);
    } else {
      cpu::copy(host->f32(), values->data(), n);
    }
  }
  backend_->synchronize();
}

}  // namespace strata::engine
