// Plan: one way to train a model on a cluster. t*p*d ranks in Megatron's order (tensor
// fastest, then data, then pipeline), v model chunks per pipeline rank, a micro-batch size,
// a pipeline schedule, a ZeRO stage, the offload tier of each model-state kind, and the
// activation recomputation policy.
#pragma once

#include <cstdint>
#include <string>

#include "cost_model/specs/json_reader.h"

namespace strata {

struct ModelSpec;
struct ClusterSpec;
struct TrainSpec;

enum class ScheduleKind { kGpipe, kOneFOneB, kInterleaved };   // "gpipe" | "1f1b" | "interleaved"
enum class OffloadTier { kNone, kCpu, kNvme };                 // "none" | "cpu" | "nvme"
enum class Recompute { kNone, kSelective, kFull };             // "none" | "selective" | "full"

struct OffloadPlan {
  OffloadTier optimizer = OffloadTier::kNone;
  OffloadTier gradients = OffloadTier::kNone;
  OffloadTier params = OffloadTier::kNone;
  bool operator==(const OffloadPlan&) const = default;
};

struct Plan {
  std::int64_t tp = 1;
  std::int64_t pp = 1;
  std::int64_t dp = 1;
  std::int64_t virtual_stages = 1;  // v: model chunks per pipeline rank (>1 only for interleaved)
  std::int64_t micro_batch = 1;     // sequences per micro-batch
  ScheduleKind schedule = ScheduleKind::kOneFOneB;
  int zero_stage = 0;               // 0..3
  OffloadPlan offload;
  Recompute recompute = Recompute::kNone;
  bool sequence_parallel = false;
  // Uneven pipeline stages (Megatron's --decoder-first/last-pipeline-num-layers): the layers
  // of the first and of the last pipeline stage, the rest shared evenly by the others; 0:
  // that stage takes an even share. Only with v = 1 (cost_model/specs/partition.h has the rule).
  // JSON "first_stage_layers" / "last_stage_layers", optional, written only when set.
  std::int64_t first_stage_layers = 0;
  std::int64_t last_stage_layers = 0;
  // Megatron-Core's --account-for-embedding-in-pipeline-split / -loss-: the embedding (the
  // loss) counted as one layer's worth of work, so the first (last) virtual stage holds one
  // layer fewer than the even share of layers + those counted (partition.h resolves it into
  // the counts above; not with them). JSON "embedding_counts_as_layer" /
  // "loss_counts_as_layer", optional, written only when true.
  bool embedding_counts_as_layer = false;
  bool loss_counts_as_layer = false;
  bool uneven_stages() const {
    return first_stage_layers > 0 || last_stage_layers > 0 || embedding_counts_as_layer ||
           loss_counts_as_layer;
  }

  bool operator==(const Plan&) const = default;

  // Strict: exactly the plan keys (see to_json), plus the optional keys that `strata plan
  // --out` adds around them ("prediction", "model", "cluster", "train"), which are skipped.
  static Plan from_json(const Json& json, const std::string& source);
  static Plan load(const std::string& path);
  Json to_json() const;

  std::int64_t world_size() const { return tp * pp * dp; }
  // ZeRO-3 with the optimizer state, the gradients and the parameters all in host memory
  // (the CPU tier, not NVMe): a unit's optimizer step then touches host memory alone.
  bool zero3_state_in_host_memory() const {
    return zero_stage == 3 && offload.optimizer == OffloadTier::kCpu &&
           offload.gradients == OffloadTier::kCpu && offload.params == OffloadTier::kCpu;
  }
  // Micro-batches per pipeline per step: global_batch / (dp * micro_batch).
  std::int64_t micro_batches(const TrainSpec& train) const;

  // Checks the plan against a model, a cluster and a training setup, throwing InfeasiblePlan
  // with a message naming the rule and the numbers: the tensor, sequence and pipeline rules
  // of cost_model/specs/partition.h, global_batch % (dp*b), interleaved needs m % pp == 0,
  // non-interleaved needs v == 1,
  // tp*pp*dp <= the cluster's GPUs (a plan may use part of a cluster: the published runs use
  // 32..3072 GPUs of Selene), a plan spanning nodes uses whole nodes, tp <= gpus_per_node
  // and its TP groups inside nodes (backend_facts.h: placement_violation),
  // ZeRO stage 0..3, offload rules (params offload needs ZeRO-3, gradient offload needs
  // ZeRO >= 2; see plan.cc).
  void check(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
             const std::string& source = "plan") const;
  // Same rules but the cluster's GPU count is not required to equal world_size (the executor
  // runs any plan on any number of local ranks).
  void check_against_model(const ModelSpec& model, const TrainSpec& train,
                           const std::string& source = "plan") const;

  // Short human label: "t8 p8 d24 v2 b1 interleaved z1 rc=full sp".
  std::string label() const;
};

std::string to_string(ScheduleKind kind);
std::string to_string(OffloadTier tier);
std::string to_string(Recompute recompute);
ScheduleKind schedule_kind_from_string(const std::string& s);  // throws ConfigError
OffloadTier offload_tier_from_string(const std::string& s);    // throws ConfigError
Recompute recompute_from_string(const std::string& s);         // throws ConfigError

}  // namespace strata
