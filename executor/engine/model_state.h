// The model state of one rank under data parallelism and ZeRO (Rajbhandari et al. 2020),
// on any Backend: every parameter unit (a flat buffer: one transformer layer, the
// embedding, the tied wte copy, the final LayerNorm; cost_model/specs/param_layout.h) with its
// gradients and AdamW moments, padded to a multiple of d and partitioned over the DP group
// by stage:
//   0  everything full; gradients all-reduced, full update.
//   1  + the optimizer state (master, m, v) holds this rank's 1/d slice; gradients all-
//        reduced, the slice updated, the parameters all-gathered (gather_params).
//   2  + gradients reduce-scattered into the rank's shard (the full buffer lives from the
//        unit's first gradient of the step to its reduction).
//   3  + parameters partitioned: the rank stores its 1/d slice; gather() all-gathers a
//        unit's full parameters, release() frees them.
// Precision: parameters are held in the backend's compute dtype. On the CPU (fp32) they are
// their own master; on CUDA (bf16) an fp32 master of the optimizer's part is kept beside
// them and AdamW writes both. Gradients, moments and every offloaded tensor are fp32.
//
// The state decides nothing about WHEN: each public call is one Program op (cost_model/
// program.h) and the engine calls it where the Program says. With p > 1 the tied wte's
// gradient is summed over the embedding group (tied_embedding_sum). Optional global-norm
// clipping counts every parameter once: TP-replicated tensors on TP rank 0 only, KV heads
// replicated over TP on the first of their copies (ParamSegment::counted_on), the tied copy
// not at all, each DP rank its slice.
// Offload (Plan::offload; ZeRO-Offload / ZeRO-Infinity), through OffloadLinks:
//   params (ZeRO-3)  the fp32 shard lives on the host ("offload:params") or NVMe and is the
//                    master; fetch() brings it up (to the compute dtype), gather() consumes
//                    the fetched shard.
//   gradients (ZeRO >= 2)  reduce_grads() reduce-scatters into a device shard that
//                    offload_grads() sends down, accumulated on the host / in place on NVMe.
//   optimizer        m, v (and a master copy of the params, unless the params are offloaded:
//                    then their shard is the master) on the host or NVMe; the step is the
//                    streamed CPU AdamW (executor/offload); the updated params come up tile
//                    by tile.
// Ordering with events, not host stalls: a fetch's H2D copy is waited for by the gather's
// stream (which casts the shard to the compute copy on that stream, then orders the DP
// all-gather after the cast) and by the host before the CPU optimizer writes the host shard;
// a gradient shard's D2H copy by the host only when it next needs the offloaded gradients
// (land_pending_down), so that the copy and the host's addition overlap the device's work.
// Every transfer is counted per link (transfers()); cost_model's offload_transfer_bytes()
// predicts the counts. Results equal the no-offload run's: the same AdamW on the same
// values (offloaded gradients are summed over micro-batches in another order: ~1 ulp).
// Every tensor goes through the Backend's accounted allocator, tagged "params", "master",
// "gradients", "optimizer", "zero3_gather", "dp_scratch", "offload:*".
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cost_model/specs/param_layout.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/train_spec.h"
#include "executor/comm/process_groups.h"
#include "executor/engine/backend.h"
#include "executor/engine/offload_params.h"
#include "executor/engine/offload_tiers.h"
#include "executor/model/param_init.h"

namespace strata::engine {

struct ParamUnit {
  UnitLayout layout;
  std::int64_t padded = 0;  // layout.count rounded up to a multiple of d
  std::int64_t shard = 0;   // padded / d
  Tensor params;            // compute dtype: full (stage 0-2) or this rank's shard (3)
  Tensor master;            // fp32 optimizer part, when the params are not their own master
  Tensor gathered;          // stage 3: full parameters between gather and release
  int gathers = 0;          // stage 3: gather() count not yet released
  Tensor fetched;           // offloaded params: the shard fetch() brought up
  Tensor grads;             // fp32 full gradients (stage 2/3: first gradient to reduction)
  Tensor grad_shard;        // stage 2/3: this rank's reduced slice (offloaded: on its way down)
  Tensor m, v;              // fp32: full (stage 0) or shard (stage >= 1)
  // Offloaded copies (host-tier fp32 tensors or NVMe tensor names).
  Tensor host_params, host_grads, host_master, host_m, host_v;
  std::string nvme_params, nvme_grads, nvme_master, nvme_m, nvme_v;
  int grad_downs = 0;       // gradient shards sent down this step
  int host_read_mark = -1;  // offloaded params: the async fetch that may still read host_params
  double grad_sq = 0;       // NVMe gradients: the shard's local sum of squares, once final
};

// AdamW's hyper-parameters for step `step` (1-based) at learning rate lr, as the kernels take
// them: the model state's updates and a captured step's device scalars (engine.h) read these.
AdamWStep adamw_step(const OptimizerSpec& opt, int step, double lr);

class ModelState {
 public:
  // Creates the units in `layouts` (order kept) and initialises the parameters with `init`,
  // or from `seed` when it is empty.
  // micro_batches: backwards per layer per step (offloaded gradients go down that often).
  // host_world: the world over host memory, for the gradient norm's scalar sum.
  ModelState(Backend& backend, std::vector<UnitLayout> layouts, const Plan& plan,
             const ProcessGroups& groups, Communicator& host_world, std::uint64_t seed,
             const OffloadOptions& options, std::int64_t micro_batches,
             const model::UnitInit& init = {});

  std::size_t size() const { return units_.size(); }
  ParamUnit& unit(std::size_t u) { return units_.at(u); }
  const ParamUnit& unit(std::size_t u) const { return units_.at(u); }
  std::int32_t index(const std::string& name) const;  // -1 when absent

  // The unit's full parameters in the compute dtype: at stage 3 only between gather() and
  // release().
  const void* weights(std::size_t u) const;
  // The unit's full fp32 gradient buffer (allocated zeroed on first use at stage 2/3).
  float* grads(std::size_t u);
  // Zeroes the persistent gradients (stage 0/1); at the start of a step.
  void begin_step();

  // The Program's state moves (program.h), one call per op.
  void fetch(std::size_t u);
  void gather(std::size_t u);
  void release(std::size_t u);
  void sum_norm_grads(std::size_t u);
  // The layer's K|V gradients summed over the TP ranks holding the same replicated KV head
  // (ParamSegment::tp_copies > 1; the groups' kv_copies()).
  void sum_kv_grads(std::size_t u);
  void reduce_grads(std::size_t u);
  void offload_grads(std::size_t u);
  void tied_embedding_sum(std::size_t u);
  // The global gradient norm (before clipping); keeps the clip factor for optimizer_step.
  // With device scalars (use_device_scalars) the norm and the factor stay on the device and
  // this returns NaN: the caller reads scalars->grad_sq after the step.
  double grad_norm(const OptimizerSpec& opt);
  // A captured step's form (engine.h, "Captured steps"): grad_norm sums on the device into
  // `scalars` and optimizer_step's AdamW reads its learning rate, step and clip factor from
  // them; the ranks' sums of squares are summed over the world's device communicator. Model
  // state on the device. Null: the host path.
  void use_device_scalars(DeviceStepScalars* scalars);
  // AdamW step `step` (1-based) of the given units at learning rate lr (optimizer_schedule.h),
  // weight decay on the tensors decays() names, with the optimizer state on the device: the
  // units go to the backend as one list (one fused launch on CUDA), offloaded gradients
  // brought up first. std::logic_error when the optimizer state is offloaded (its steps are
  // host_optimizer_step's).
  void optimizer_step(const std::vector<std::size_t>& units, const OptimizerSpec& opt, int step,
                      double lr);
  // The same step of one unit whose optimizer state is offloaded, in two parts: the gradient
  // shards still on their way down land now, on the calling thread; the rest, returned, is
  // host work that touches only this unit's host state and its device parameters (and the
  // locked transfer counters), so the caller may run it on the backend's host stream while
  // it goes on with other units (program.h: the host optimizer inside the backward).
  // apart: the work runs on a host stream apart (Backend::host_stream_apart), which waits
  // here for the reads of the unit's host shard it overwrites (this step's fetches); else it
  // runs now, and the work waits for them itself.
  struct HostStep {
    std::string op;                         // "CPU AdamW of layer3"
    std::vector<HostTouch> touches;         // host memory it touches (host_steps_host_only)
    std::function<void()> work;
  };
  HostStep host_optimizer_step(std::size_t u, const OptimizerSpec& opt, int step, double lr,
                               bool apart);
  // Whether a host optimizer step touches host memory alone (parameters, gradients and
  // optimizer state all in host memory; no device copy, no NVMe): what a host stream that
  // runs nothing else (Backend::host_stream_host_memory_only) may run.
  bool host_steps_host_only() const { return host_only_; }
  void gather_params(std::size_t u);

  // Bytes moved between tiers since reset_transfers() (empty without offload), and the
  // seconds of them spent inside optimizer_step (the report counts them as offload).
  TransferBytes transfers() const { return links_ ? links_->bytes() : TransferBytes{}; }
  // Whether some tier is NVMe (the rank has an NvmeStore, whose io_uring engine is one thread's).
  bool has_nvme_store() const { return links_ && links_->has_store(); }
  double optimizer_transfer_s() const { return optimizer_transfer_s_.load(); }
  void reset_transfers();
  int prefetch_distance() const { return options_.prefetch_depth; }

  // Full fp32 parameters of a unit as the single-rank model has them on this TP rank: for
  // tests and checkpoints. Collective over the DP group at stage 3.
  std::vector<float> full_params(const std::string& name);

  // Checkpoints (executor/checkpoint): the elements [begin, end) of unit u's padded buffer
  // that this rank's optimizer owns (its ZeRO slice; the whole unit at stage 0), and that
  // part's fp32 state read from, or written to, wherever the plan keeps it (device, host or
  // NVMe). kParams is the fp32 master: the kept master, the offloaded copy, or the
  // parameters themselves when they are fp32. Called between steps.
  enum class StateKind { kParams, kAdamM, kAdamV };
  struct Part {
    std::int64_t begin = 0, end = 0;
  };
  Part optimizer_part(std::size_t u) const;
  std::vector<float> read_part(std::size_t u, StateKind kind);
  // The moments only: the parameters come in through the constructor's `init`, which places
  // them (and their master) in every tier as a fresh run's would be.
  void write_moments(std::size_t u, const std::vector<float>& m, const std::vector<float>& v);

 private:
  bool params_off() const { return zero_stage_ == 3 && offload_.params != OffloadTier::kNone; }
  bool grads_off() const { return zero_stage_ >= 2 && offload_.gradients != OffloadTier::kNone; }
  bool optimizer_off() const { return offload_.optimizer != OffloadTier::kNone; }
  bool own_master() const { return !backend_->separate_compute_copy(); }
  std::int64_t opt_elements(const ParamUnit& u) const { return zero_stage_ >= 1 ? u.shard : u.padded; }
  // The first element of this rank's optimizer part in the unit (0 at stages 0 and 3).
  std::int64_t opt_offset(const ParamUnit& u) const;
  Tensor alloc(MemoryTier tier, DType dtype, std::int64_t n, const std::string& tag, bool zeroed = true);
  // Elements of a unit this rank stores: the padded unit, or its shard at stage 3.
  std::int64_t stored_elements(const ParamUnit& u) const;
  // Allocates u's state and fills it with init_values (through `init`, a host buffer of at
  // least stored_elements(u) floats).
  void place(ParamUnit& u, const model::UnitInit& init_values, float* init);
  // place() when init_values is a model::SeededInit, nothing is offloaded and the backend
  // draws where the state lives (fp32 parameters straight into themselves; bf16 ones
  // through a staging buffer, and their master drawn again); false, having placed
  // nothing, otherwise.
  bool place_seeded_on_device(ParamUnit& u, const model::UnitInit& init_values, std::int64_t lo);
  void place_offloaded(ParamUnit& u, const float* init_part);
  // The bytes of u's state on each tier (set-up progress: OffloadOptions::on_placed).
  TierBytes placed_bytes(const ParamUnit& u) const;
  ShardSource shard_source(const ParamUnit& u) const;
  double local_sum_of_squares(const ParamUnit& u, const float* slice, std::int64_t lo,
                              bool on_host) const;
  // The parts of u's gradient slice (from unit element lo) that this rank counts in the norm.
  std::vector<FloatSpan> norm_spans(const ParamUnit& u, const float* slice, std::int64_t lo) const;
  void send_grad_shard_down(ParamUnit& u);
  // Adds the gradient shard last sent down into its tier, after the host waits for its copy.
  // Called before anything reads the offloaded gradients (the next shard down, the norm, the
  // optimizer, the next step), so that the copy and the addition overlap the device's work.
  void land_pending_down();
  // The optimizer part [0, n) of unit u split into runs of one weight decay: [begin, end).
  struct DecayRun {
    std::int64_t begin = 0, end = 0;
    bool decayed = true;
  };
  std::vector<DecayRun> decay_runs(const ParamUnit& u, const OptimizerSpec& opt) const;
  // Adds u's tensors to `batch`, and launches the batch when u's state has to move after
  // the update (offloaded parameters); optimizer_step launches what is left.
  void update_on_device(ParamUnit& u, const AdamWStep& hp, const std::vector<DecayRun>& runs,
                        std::vector<AdamWSpan>& batch);
  // grad_scale: the clip factor the step's norm gave (1 without clipping); host_read_mark:
  // u's, when the step was issued (the fetches that read its host shard).
  void update_on_cpu(ParamUnit& u, const AdamWStep& hp, const std::vector<DecayRun>& runs,
                     float grad_scale, int host_read_mark);

  Backend* backend_;
  const ProcessGroups* groups_;
  Communicator* host_world_;
  int zero_stage_;
  OffloadPlan offload_;
  bool host_only_ = false;  // Plan::zero3_state_in_host_memory
  OffloadOptions options_;
  std::int64_t micro_batches_;
  bool sequence_parallel_;
  std::vector<ParamUnit> units_;
  std::map<std::string, std::size_t> index_;
  std::unique_ptr<OffloadLinks> links_;    // any offload
  std::unique_ptr<ParamFetcher> fetcher_;  // offloaded params
  // The gradient shard on its way down (grads offloaded): its unit, the pinned host copy
  // (empty when it went straight into host_grads), the mark its D2H copy is done at.
  struct PendingDown {
    std::size_t unit = 0;
    Tensor staging;
    int ready = -1;
    bool first = false, last = false;
  };
  std::optional<PendingDown> pending_down_;
  float clip_ = 1.0f;
  DeviceStepScalars* device_scalars_ = nullptr;  // use_device_scalars
  std::atomic<double> optimizer_transfer_s_ = 0;  // added to by the host stream too
};

}  // namespace strata::engine
