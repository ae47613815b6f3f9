// StepReport is the one record that is both a Prediction (from the cost model) and a
// RunReport (measured by the executor): same fields, so `strata compare` is a field diff.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/memory_kinds.h"
#include "cost_model/specs/plan.h"

namespace strata {

// Bytes in each memory tier.
struct TierBytes {
  double device = 0;
  double host = 0;
  double nvme = 0;
  bool operator==(const TierBytes&) const = default;
};

// Where one step's time goes. Each part is the time on the critical path of the slowest
// pipeline rank (exposed time: whatever overlaps with compute is not counted twice);
// the parts add up to step_time_s.
struct StepTimeParts {
  double forward_s = 0;          // forward compute incl. logits
  double backward_s = 0;         // backward compute (without recompute)
  double recompute_s = 0;        // extra forward during backward
  double tp_comm_s = 0;          // exposed tensor-parallel collectives
  double pp_comm_s = 0;          // exposed pipeline sends/receives
  double dp_comm_s = 0;          // exposed data-parallel / ZeRO collectives
  double offload_s = 0;          // exposed PCIe / NVMe transfers
  double optimizer_s = 0;        // optimizer step (device or CPU)
  double bubble_s = 0;           // pipeline idle time
  double other_s = 0;            // everything else (measured: unattributed)
  double sum() const;
};

// Offload traffic of one step, bytes per link and direction (ZeRO-Offload / ZeRO-Infinity:
// gradients down and parameters up over PCIe, optimizer state and parameters to and from NVMe).
// The tensors' own bytes: the 4 KiB padding of O_DIRECT transfers is not counted.
struct TransferBytes {
  double device_to_host = 0;
  double host_to_device = 0;
  double host_to_nvme = 0;
  double nvme_to_host = 0;
  bool empty() const {
    return device_to_host == 0 && host_to_device == 0 && host_to_nvme == 0 && nvme_to_host == 0;
  }
  bool operator==(const TransferBytes&) const = default;
};

// One rank's bytes at its device peak, by kind (memory_kinds.h) and tier; the kinds add up
// to the rank's peak on each tier.
struct MemoryByKind {
  std::array<TierBytes, kMemoryKindCount> bytes{};
  TierBytes& operator[](MemoryKind kind) { return bytes[static_cast<std::size_t>(kind)]; }
  const TierBytes& operator[](MemoryKind kind) const {
    return bytes[static_cast<std::size_t>(kind)];
  }
  TierBytes total() const;
  // The kind with the most device bytes (the first in kMemoryKinds' order on ties).
  MemoryKind largest_on_device() const;
  bool operator==(const MemoryByKind&) const = default;
};

struct RankMemory {
  std::int64_t rank = 0;        // global rank (the prediction lists pipeline stage 0..p-1 at tp=dp=0)
  std::int64_t pp_rank = 0;
  TierBytes peak_bytes;
  // JSON "by_kind", written when known: a prediction's per stage, a run's from its
  // allocation tags at the device peak. Reports written before it have none.
  std::optional<MemoryByKind> by_kind;
  // Prediction only (JSON "in_flight", written when > 0): the chunk-micro-batches whose
  // activations the stage holds at its peak (memory_model.h: in_flight_chunks).
  std::int64_t in_flight = 0;
};

// A pipeline's idle time, split (prediction only, p > 1). The critical rank is the one whose
// step ends last: the parts (StepTimeParts) are its time, bubble_s its idle. Of that idle,
// imbalance_s is what it waits for the busiest stage's extra work (that stage's busy time
// minus its own: what a better split of the layers could regain), and fill_drain_s the rest,
// the schedule's fill and drain at this many micro-batches (what more micro-batches or
// interleaving shrink).
struct PipelineIdle {
  std::vector<double> stage_busy_s;  // [pp_rank] compute-stream time in the pipeline
  std::int64_t critical_rank = 0;
  std::int64_t busiest_rank = 0;     // the most busy time (the lowest on ties)
  double fill_drain_s = 0;
  double imbalance_s = 0;
  // From the critical rank's bubble and the stages' busy times, as above.
  static PipelineIdle split(std::vector<double> stage_busy_s, std::int64_t critical_rank,
                            double bubble_s);
  bool operator==(const PipelineIdle&) const = default;
};

// The rank with the most device bytes among `ranks` (the first on ties); nullptr if none.
const RankMemory* worst_device_rank(const std::vector<RankMemory>& ranks);

struct StepReport {
  std::string kind;             // "prediction" | "measurement"
  std::string plan_label;       // Plan::label()
  double step_time_s = 0;
  StepTimeParts parts;
  double tokens_per_s = 0;
  // FLOP/s per GPU in TFLOP/s, two ways: what the hardware computed (hardware_flops: the
  // recomputed forward counted when the plan recomputes), and the model's FLOPs alone
  // (model_flops_without_recompute, MFU's numerator). For full recomputation the first is
  // Megatron's F, the published papers' figure.
  double tflops_per_gpu = 0;
  double model_tflops_per_gpu = 0;
  double mfu = 0;               // model FLOPs utilisation: model_flops_without_recompute per GPU
                                // per second / device peak in the train precision
  double bubble_fraction = 0;   // bubble_s / step_time_s for the prediction; measured idle share
  TierBytes memory_bytes;       // worst rank, per tier
  std::vector<RankMemory> per_rank;
  std::int64_t steps_measured = 0;  // RunReport only: steps the medians are over
  std::vector<double> losses;       // RunReport only
  // Offload plans only (JSON "transfers", written when non-empty): the worst rank's bytes per
  // link in one step.
  TransferBytes transfers;
  // RunReport only (JSON "stopped_by", written when set): "SIGINT" or "SIGTERM" when the run
  // was stopped before its last step; the report then covers the steps_measured steps done.
  std::string stopped_by;
  // RunReport only (JSON "captured_steps", written when true): the steps were captured once as
  // a CUDA graph and replayed (`strata run --cuda-graphs` on a plan that allows it).
  bool captured_steps = false;
  // Jobs across nodes only (JSON "inter_node_comm_s", written when set): the seconds of
  // tp/pp/dp comm above whose groups span nodes, the inter-node link's share
  // (inter_node_share.h).
  std::optional<double> inter_node_comm_s;
  // Predictions of pipelines only (JSON "pipeline_idle", written when set).
  std::optional<PipelineIdle> pipeline_idle;

  static StepReport from_json(const Json& json, const std::string& source);
  static StepReport load(const std::string& path);
  Json to_json() const;
};

using Prediction = StepReport;
using RunReport = StepReport;

// Megatron's model FLOPs per step: F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), B = global
// batch. The published formula counts the transformer layers four times a forward (forward,
// backward = 2x, and the recomputed forward of full recomputation) and the logits three
// times; it is used for every plan, whatever its recomputation, so that TFLOP/s figures are
// comparable with the papers' and with each other.
double megatron_model_flops(const struct ModelSpec& model, std::int64_t global_batch);

// Model FLOPs with no recomputation counted, 72 B s l h^2 (1 + s/(6h) + V/(12 l h)): the
// numerator of MFU. Megatron's F above credits every plan with the recomputed forward, so
// F / peak would overstate the utilisation of a plan that does not recompute by up to 4/3.
double model_flops_without_recompute(const struct ModelSpec& model, std::int64_t global_batch);

// The FLOPs the hardware computes in a step: the model's, plus the recomputed forward when
// the plan recomputes: full, one layer forward per layer, 24 B s l h^2 (1 + s/(6h)) (so the
// total is Megatron's F); selective, the attention core's forward, 4 B s^2 h per layer.
double hardware_flops(const struct ModelSpec& model, std::int64_t global_batch, Recompute recompute);
// All three follow the family (step_report.cc: 12 h^2 becomes the layer's GEMM weights);
// the closed forms above are its value for GPT (f = 4h).

}  // namespace strata
