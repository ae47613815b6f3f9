// The cost model's front door: predict() turns (model, cluster, train, plan[, profile]) into
// a Prediction (step time and its parts, throughput, memory per tier), and stage_op_times()
// gives the per-op durations that `strata simulate` replays over a generated Schedule.
//
// predict() is analytic and cheap (no schedule generation, no per-op allocation): the planner
// calls it for thousands of candidates. Its pipeline term is the closed form that the
// simulator reproduces for uniform stages: (m + (p-1)/v) chunk-rounds of the slowest rank.
// Deliberately not here: the primitives themselves (compute_model.h, collectives.h,
// time_model.h), the memory model (memory_model.h), schedules (schedule.h).
#pragma once

#include <cstdint>
#include <vector>

#include "cost_model/cluster_spec.h"
#include "cost_model/model_spec.h"
#include "cost_model/plan.h"
#include "cost_model/profile.h"
#include "cost_model/step_report.h"
#include "cost_model/train_spec.h"

namespace strata {

// Durations of one (micro-batch, chunk) on one pipeline rank, in seconds.
struct ChunkOpTimes {
  // Forward of one micro-batch through this chunk's layers (plus the embedding on virtual
  // stage 0, the final LayerNorm + logits + loss on the last virtual stage), including the
  // exposed tensor-parallel collectives and, under ZeRO-3, the exposed parameter gathers.
  double forward_s = 0;
  // Backward of the same, including recomputation (full: one extra forward; selective: the
  // attention core) and its TP collectives.
  double backward_s = 0;
  // The parts, for traces and reports: forward_s = compute_forward_s + comm_forward_s,
  // backward_s = compute_backward_s + recompute_s + comm_backward_s.
  double compute_forward_s = 0;
  double compute_backward_s = 0;
  double recompute_s = 0;
  double comm_forward_s = 0;   // TP (+ ZeRO-3 gather) exposed in forward
  double comm_backward_s = 0;  // TP (+ ZeRO-3 gather/reduce-scatter) exposed in backward/recompute
};

// Per pipeline rank: its chunks and the tail tasks that run once per step after its last
// backward.
struct RankOpTimes {
  std::int64_t pp_rank = 0;
  std::vector<ChunkOpTimes> chunks;  // [v], local chunk index
  double dp_sync_s = 0;    // exposed DP gradient reduction / ZeRO collectives at step end
  double offload_s = 0;    // exposed PCIe / NVMe transfers at step end
  double optimizer_s = 0;  // optimizer step (device, or CPU under optimizer offload)
  double tail_s() const { return dp_sync_s + offload_s + optimizer_s; }
};

struct StageOpTimes {
  std::vector<RankOpTimes> ranks;  // [p]
  // One activation (or its gradient) sent between adjacent pipeline ranks: s*b*h elements
  // (/t with Megatron's scatter/gather across nodes), over the link the two ranks share.
  double p2p_s = 0;
  std::int64_t micro_batches = 0;  // m per pipeline per step
};

// Which conventions the prediction follows. The default models strata's own executor on the
// cluster's backend (CUDA: flash attention, no dropout; CPU: materialized attention, no
// dropout). `published` models the published Megatron-LM runs instead: materialized
// attention with dropout, and the memory model's published (Korthikanti) activations.
struct CostModelOptions {
  bool published = false;
};

// Analytic prediction of one training step. Throws InfeasiblePlan if plan.check() fails.
// With a Profile, measured GEMM/elementwise/collective rates replace the default curves.
Prediction predict(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                   const Plan& plan, const Profile* profile = nullptr);

// Per-op durations for the simulator (same model as predict()). Throws InfeasiblePlan.
StageOpTimes stage_op_times(const ModelSpec& model, const ClusterSpec& cluster,
                            const TrainSpec& train, const Plan& plan,
                            const Profile* profile = nullptr);

// The same with explicit conventions.
Prediction predict(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                   const Plan& plan, const Profile* profile, const CostModelOptions& options);
StageOpTimes stage_op_times(const ModelSpec& model, const ClusterSpec& cluster,
                            const TrainSpec& train, const Plan& plan, const Profile* profile,
                            const CostModelOptions& options);

}  // namespace strata
