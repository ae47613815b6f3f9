// The model state of one rank under data parallelism and ZeRO (Rajbhandari et al. 2020):
// every parameter unit (a flat fp32 buffer: one transformer layer, the embedding, the tied
// wte copy, the final LayerNorm; see executor/model/param_layout.h) with its gradients and
// AdamW moments, padded to a multiple of d and partitioned over the DP group by stage:
//   0  everything full; gradients all-reduced, full update.
//   1  + m, v hold this rank's 1/d slice; gradients all-reduced, the slice updated, the
//        parameters all-gathered.
//   2  + gradients reduce-scattered: after the step's backwards the full gradient buffer is
//        reduce-scattered into this rank's shard and freed.
//   3  + parameters partitioned: the rank stores its 1/d slice; acquire() all-gathers a
//        unit's full parameters right before use, release() frees them.
// With p > 1 the tied wte's gradient is first summed over the embedding group (first and last
// stage), so both copies stay equal (Megatron). Optional global-norm clipping counts every
// parameter once: TP-replicated tensors on TP rank 0 only, the tied copy not at all, each DP
// rank its slice.
// Every buffer goes through the AccountingAllocator (device tier), tagged "params",
// "gradients", "optimizer", "zero3_gather", "dp_scratch".
// Deliberately not here: offload (the tiers of Plan::offload), gradient buckets overlapped
// with backward, mixed precision.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cost_model/train_spec.h"
#include "executor/comm/process_groups.h"
#include "executor/memory/accounting_allocator.h"
#include "executor/model/param_layout.h"

namespace strata::engine {

struct ParamUnit {
  model::UnitLayout layout;
  std::int64_t padded = 0;  // layout.count rounded up to a multiple of d
  std::int64_t shard = 0;   // padded / d
  Buffer params;            // full (stage 0-2) or this rank's shard (stage 3)
  Buffer gathered;          // stage 3: full parameters while acquired
  int acquired = 0;         // stage 3: acquire() count
  Buffer grads;             // full gradients (stage 2/3: only between first backward and reduce)
  Buffer grad_shard;        // stage 2/3: this rank's reduced slice
  Buffer m, v;              // full (stage 0) or shard (stage >= 1)
};

// Seconds spent in data-parallel / ZeRO collectives and in the optimizer, for the report.
struct StateTimes {
  double dp_comm_s = 0;     // gradient all-reduce / reduce-scatter, parameter all-gathers
  double optimizer_s = 0;   // norm, clipping and AdamW
};

class ModelState {
 public:
  // Creates the units in `layouts` (order kept) and initialises the parameters from `seed`.
  ModelState(std::vector<model::UnitLayout> layouts, int zero_stage, const ProcessGroups& groups,
             std::uint64_t seed, AccountingAllocator& alloc);

  ParamUnit& unit(const std::string& name);
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  const std::vector<ParamUnit>& units() const { return units_; }

  // Full parameters of the unit, valid until the matching release().
  const float* acquire(const std::string& name);
  void release(const std::string& name);
  // The unit's full gradient buffer (allocated zeroed on first use in a step at stage 2/3).
  float* grads(const std::string& name);

  // Zeroes the persistent gradients (stage 0/1); call at the start of a step.
  void zero_grads();

  // After the step's backwards: tied-embedding sum, DP reduction, optional clipping, AdamW
  // (step is 1-based). Returns the global gradient norm (before clipping).
  double reduce_and_update(const OptimizerSpec& opt, int step, Communicator& world);

  const StateTimes& times() const { return times_; }
  void reset_times() { times_ = {}; }

  // Full parameters of a unit as the single-rank model would have them on this TP rank
  // (gathered at stage 3): for tests. Collective over the DP group at stage 3.
  std::vector<float> full_params(const std::string& name);

 private:
  double local_sum_of_squares(const ParamUnit& u, const float* slice, std::int64_t lo) const;

  int zero_stage_;
  const ProcessGroups* groups_;
  AccountingAllocator* alloc_;
  std::vector<ParamUnit> units_;
  std::map<std::string, std::size_t> index_;
  StateTimes times_;
};

}  // namespace strata::engine
