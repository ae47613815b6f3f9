// What each kind of model state costs per parameter on each backend, and where it lives:
// the one place that says it, read by the engine's allocations (executor/engine/
// model_state.cc) and by the memory model (memory_model.cc), so the two cannot disagree.
//
// Per element of a unit's flat buffer (padded to a multiple of d, partition.h), on one rank:
//   params     the working copy the kernels read, in the backend's compute dtype (fp32 on
//              the CPU, bf16 on CUDA); ZeRO-3: this rank's 1/d shard. Offloaded (ZeRO-3 +
//              Plan::offload.params): an fp32 shard on that tier, which is then the master.
//   master     the fp32 copy AdamW updates, of the optimizer's part (ZeRO >= 1: the 1/d
//              slice), on the optimizer's tier; none when the params are offloaded (the
//              offloaded shard is the master) or fp32 with the optimizer beside them (their
//              own master; an offloaded optimizer keeps its own fp32 copy).
//   gradients  fp32 in the engine (the kernels accumulate parameter gradients in fp32 on
//              both backends): ZeRO 0/1 a full persistent buffer; ZeRO 2/3 the reduced 1/d
//              shard (on the gradients' tier), the full buffer living only from the unit's
//              first gradient of a step to its reduction (full_gradient_elements).
//   moments    AdamW's m and v, fp32 each, of the optimizer's part, on the optimizer's tier.
// Deliberately not here: activations (memory_model.h), transient buffers (the engine's and
// the walk's), the published mixed-precision convention (zero_model_state_bytes_per_param).
#pragma once

#include <cstdint>

#include "cost_model/specs/backend_facts.h"
#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/plan.h"

namespace strata {

inline constexpr int kMasterBytes = 4;    // fp32
inline constexpr int kGradientBytes = dtype_bytes(kGradientDType);  // backend_facts.h
inline constexpr int kMomentBytes = 4;    // fp32, each of m and v
inline constexpr int kMoments = 2;        // AdamW: m and v

// The compute dtype's bytes on a backend: the engine's activations and parameter working
// copy (CPU: fp32; CUDA: bf16 mixed precision whatever the train spec says, which `strata
// run --backend cuda` insists be bf16).
int backend_compute_bytes(Backend backend);

// One kind of state of one unit on one rank: `elements` of `bytes` each, on `tier`
// (kNone: the device).
struct StatePart {
  std::int64_t elements = 0;
  int bytes = 0;
  OffloadTier tier = OffloadTier::kNone;
  double total() const { return static_cast<double>(elements) * bytes; }
};

struct UnitState {
  std::int64_t padded = 0;  // the unit's elements rounded up to a multiple of d
  std::int64_t shard = 0;   // padded / d
  StatePart params, master, gradients;
  StatePart moments;        // one of m, v (kMoments of them)
  // ZeRO 2/3: the full fp32 buffer a step's gradients accumulate in before the reduction
  // (0 at ZeRO 0/1, where `gradients` is that buffer).
  std::int64_t full_gradient_elements = 0;
  // Bytes of this state on `tier` (kNone: the device), moments counted twice.
  double bytes_on(OffloadTier tier) const;
};

// The state of a unit of `unit_params` parameters on one of d ranks, by ZeRO stage and the
// plan's offload, with `compute_bytes` the backend's (backend_compute_bytes). master_apart:
// a master is kept even beside fp32 params (the CPU backend's CUDA-semantics mode runs the
// CUDA backend's buffers in fp32). Throws std::invalid_argument on d < 1, unit_params < 0,
// zero_stage outside 0..3 or compute_bytes other than 2 or 4.
UnitState unit_state(std::int64_t unit_params, std::int64_t d, int zero_stage,
                     const OffloadPlan& offload, int compute_bytes, bool master_apart = false);

}  // namespace strata
