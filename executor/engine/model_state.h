// The model state of one rank under data parallelism and ZeRO (Rajbhandari et al. 2020):
// every parameter unit (a flat fp32 buffer: one transformer layer, the embedding, the tied
// wte copy, the final LayerNorm; see cost_model/param_layout.h) with its gradients and
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
// Offload (Plan::offload; ZeRO-Offload / ZeRO-Infinity), through OffloadLinks:
//   params (ZeRO-3)  the shard lives on the host ("offload:params") or NVMe; acquire()
//                    takes it up into a device buffer (prefetch() ahead of use), gathers,
//                    frees it.
//   gradients (ZeRO >= 2)  the reduced shard lives on the host ("offload:gradients") or NVMe.
//                    A layer's gradients are reduce-scattered and sent down after each
//                    micro-batch's backward of it (layer_backward_done(): the full gradient
//                    then lives on the device for one layer's backward only), accumulated on
//                    the host / in place on NVMe; the other units' once the step's tied-
//                    embedding sum is done.
//   optimizer        m, v (and a master copy of the params, unless the params are offloaded:
//                    then their shard is the master) on the host ("offload:optimizer") or
//                    NVMe; the step is the streamed CPU AdamW (executor/offload), gradients go
//                    down before it and the updated params come up after each tile.
// Every transfer is counted per link (transfers()); cost_model's offload_transfer_bytes()
// predicts the counts. Results equal the no-offload run's: the same kernels on the same
// values (offloaded gradients are summed over micro-batches in another order: ~1 ulp).
// Deliberately not here: gradient buckets overlapped with backward, mixed precision.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cost_model/train_spec.h"
#include "executor/comm/process_groups.h"
#include "executor/engine/offload_params.h"
#include "executor/engine/offload_tiers.h"
#include "executor/memory/accounting_allocator.h"
#include "cost_model/param_layout.h"
#include "kernels/cpu/adamw.h"

namespace strata::engine {

struct ParamUnit {
  UnitLayout layout;
  std::int64_t padded = 0;  // layout.count rounded up to a multiple of d
  std::int64_t shard = 0;   // padded / d
  Buffer params;            // full (stage 0-2) or this rank's shard (stage 3)
  Buffer gathered;          // stage 3: full parameters while acquired
  int acquired = 0;         // stage 3: acquire() count
  Buffer grads;             // full gradients (stage 2/3: only between first backward and reduce)
  Buffer grad_shard;        // stage 2/3: this rank's reduced slice
  Buffer m, v;              // full (stage 0) or shard (stage >= 1)
  // Offloaded copies (see the header comment); host-tier buffers or NVMe tensor names.
  Buffer host_params, host_grads, host_master, host_m, host_v;
  std::string nvme_params, nvme_grads, nvme_master, nvme_m, nvme_v;
  int grad_downs = 0;        // gradient shards sent down this step
  double grad_sq = 0;        // NVMe gradients: the shard's local sum of squares, once final
};

// Seconds spent in data-parallel / ZeRO collectives and in the optimizer, for the report.
struct StateTimes {
  double dp_comm_s = 0;     // gradient all-reduce / reduce-scatter, parameter all-gathers
  double optimizer_s = 0;   // norm, clipping and AdamW
  double offload_s = 0;     // transfers between memory tiers (offload plans)
};

class ModelState {
 public:
  // Creates the units in `layouts` (order kept) and initialises the parameters from `seed`.
  // offload / options: where the state lives (Plan::offload, checked by Plan::check: params
  // need ZeRO-3, gradients ZeRO >= 2); micro_batches: backwards per layer per step. With
  // sequence_parallel the engine sums LayerNorm gradients over TP at the end of the
  // schedule, so offloaded layer gradients go down then, not after each backward.
  ModelState(std::vector<UnitLayout> layouts, int zero_stage, const ProcessGroups& groups,
             std::uint64_t seed, AccountingAllocator& alloc, const OffloadPlan& offload = {},
             const OffloadOptions& options = {}, std::int64_t micro_batches = 1,
             bool sequence_parallel = false);

  ParamUnit& unit(const std::string& name);
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  const std::vector<ParamUnit>& units() const { return units_; }

  // Full parameters of the unit, valid until the matching release().
  const float* acquire(const std::string& name);
  void release(const std::string& name);
  // Offloaded ZeRO-3 params: starts bringing the unit's shard up for a later acquire() (a
  // no-op otherwise, or while the unit is acquired).
  void prefetch(const std::string& name);
  int prefetch_depth() const { return links_ ? links_->options().prefetch_depth : 0; }
  // The engine calls this after each backward of a transformer layer: with offloaded
  // gradients the layer's gradient is reduce-scattered and its shard sent down now.
  void layer_backward_done(const std::string& name);
  // The unit's full gradient buffer (allocated zeroed on first use in a step at stage 2/3).
  float* grads(const std::string& name);

  // Zeroes the persistent gradients (stage 0/1); call at the start of a step.
  void zero_grads();

  // After the step's backwards: tied-embedding sum, DP reduction, optional clipping, AdamW
  // (step is 1-based). Returns the global gradient norm (before clipping).
  double reduce_and_update(const OptimizerSpec& opt, int step, Communicator& world);

  const StateTimes& times() const { return times_; }
  // Also restarts the transfer counters: call at the start of a step.
  void reset_times();
  // Bytes moved between tiers since reset_times() (empty without offload).
  TransferBytes transfers() const { return links_ ? links_->bytes() : TransferBytes{}; }
  const OffloadPlan& offload() const { return offload_; }

  // Full parameters of a unit as the single-rank model would have them on this TP rank
  // (gathered at stage 3): for tests. Collective over the DP group at stage 3.
  std::vector<float> full_params(const std::string& name);

 private:
  double local_sum_of_squares(const ParamUnit& u, const float* slice, std::int64_t lo) const;
  bool params_off() const { return zero_stage_ == 3 && offload_.params != OffloadTier::kNone; }
  bool grads_off() const { return zero_stage_ >= 2 && offload_.gradients != OffloadTier::kNone; }
  bool optimizer_off() const { return offload_.optimizer != OffloadTier::kNone; }
  bool early_reduce(const ParamUnit& u) const {
    return grads_off() && u.layout.kind == UnitKind::kLayer && !sequence_parallel_;
  }
  ShardSource shard_source(const ParamUnit& u) const;
  float* grad_slice(ParamUnit& u);
  void place_offloaded(ParamUnit& u, std::int64_t dp_rank);
  void send_grad_shard_down(ParamUnit& u, const float* shard, std::int64_t downs_per_step);
  void update_unit(ParamUnit& u, const kernels::cpu::AdamWParams& hp, int step, float clip);
  void update_on_cpu(ParamUnit& u, const kernels::cpu::AdamWParams& hp, int step, float clip);

  int zero_stage_;
  const ProcessGroups* groups_;
  AccountingAllocator* alloc_;
  std::vector<ParamUnit> units_;
  std::map<std::string, std::size_t> index_;
  StateTimes times_;
  OffloadPlan offload_;
  std::int64_t micro_batches_ = 1;
  bool sequence_parallel_ = false;
  std::unique_ptr<OffloadLinks> links_;     // any offload
  std::unique_ptr<ParamFetcher> fetcher_;   // offloaded params
};

}  // namespace strata::engine
