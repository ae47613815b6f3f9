// The model state's widths and tiers (see model_state_bytes.h).
#include "cost_model/specs/model_state_bytes.h"

#include <fmt/format.h>

#include <stdexcept>

namespace strata {

int backend_compute_bytes(Backend backend) {
  return static_cast<int>(dtype_bytes(backend_facts(backend).compute_dtype));
}

double UnitState::bytes_on(OffloadTier tier) const {
  double total = 0;
  for (const StatePart* p : {&params, &master, &gradients}) {
    if (p->tier == tier) total += p->total();
  }
  if (moments.tier == tier) total += kMoments * moments.total();
  return total;
}

UnitState unit_state(std::int64_t unit_params, std::int64_t d, int zero_stage,
                     const OffloadPlan& offload, int compute_bytes, bool master_apart) {
  if (d < 1 || unit_params < 0 || zero_stage < 0 || zero_stage > 3 ||
      (compute_bytes != 2 && compute_bytes != 4)) {
    throw std::invalid_argument(fmt::format(
        "unit_state: unit_params {}, d {}, zero_stage {}, compute_bytes {}; expected >= 0, >= 1, "
        "0..3, 2 or 4", unit_params, d, zero_stage, compute_bytes));
  }
  UnitState s;
  s.padded = (unit_params + d - 1) / d * d;
  s.shard = s.padded / d;
  // Offload applies where ZeRO partitions the state (plan.cc's rules): parameters at stage 3
  // (gradients from stage 2: their shard's tier below).
  const bool params_off = zero_stage == 3 && offload.params != OffloadTier::kNone;
  const std::int64_t optimizer_part = zero_stage >= 1 ? s.shard : s.padded;
  const std::int64_t stored = zero_stage >= 3 ? s.shard : s.padded;

  s.params = params_off ? StatePart{stored, kMasterBytes, offload.params}
                        : StatePart{stored, compute_bytes, OffloadTier::kNone};
  // fp32 params are their own master only where the optimizer runs beside them.
  const bool own_master =
      !master_apart && compute_bytes == kMasterBytes && offload.optimizer == OffloadTier::kNone;
  if (!own_master && !params_off) s.master = StatePart{optimizer_part, kMasterBytes, offload.optimizer};
  if (zero_stage <= 1) {
    s.gradients = StatePart{s.padded, kGradientBytes, OffloadTier::kNone};
  } else {
    s.gradients = StatePart{s.shard, kGradientBytes, offload.gradients};
    s.full_gradient_elements = s.padded;
  }
  s.moments = StatePart{optimizer_part, kMomentBytes, offload.optimizer};
  return s;
}

}  // namespace strata
