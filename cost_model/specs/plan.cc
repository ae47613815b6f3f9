// Plan loading, the legality rules of a plan and its label; see plan.h. Does not judge
// whether a plan fits in memory or is fast (the memory and time models do), only whether it
// can be run at all.
//
// Rule choices made here (beyond Megatron's divisibility rules):
// - Offload: parameters may leave the device only under ZeRO-3 (each rank then fetches the
//   layer it needs, as ZeRO-Infinity does); gradients only under ZeRO >= 2 (ZeRO-Offload
//   reduce-scatters them and streams each rank's shard out). Optimizer state may be
//   offloaded at any stage, 0 included: the optimizer step runs wherever its state lives,
//   which with d = 1 (one GPU, ZeRO-Offload's setting) needs no partitioning at all.
// - "interleaved" with v = 1 is legal and runs exactly the 1F1B order (the schedule
//   generator's choice); it still needs m % p == 0 like any interleaved plan. v > 1 needs
//   "interleaved".
// - Sequence parallelism splits LayerNorm/dropout activations over the tensor-parallel
//   group, so it needs tp > 1. Megatron-LM also asks seq_len % tp == 0; that rule is not
//   enforced here because the planner's generators do not apply it (every plan they emit
//   must pass check()); add it to both together if the executor needs it.
#include "cost_model/specs/plan.h"

#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/backend_facts.h"
#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/limits.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/partition.h"
#include "cost_model/specs/train_spec.h"

namespace strata {

std::string to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGpipe: return "gpipe";
    case ScheduleKind::kOneFOneB: return "1f1b";
    case ScheduleKind::kInterleaved: return "interleaved";
  }
  return "unknown";
}

std::string to_string(OffloadTier tier) {
  switch (tier) {
    case OffloadTier::kNone: return "none";
    case OffloadTier::kCpu: return "cpu";
    case OffloadTier::kNvme: return "nvme";
  }
  return "unknown";
}

std::string to_string(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "unknown";
}

namespace {

const std::vector<std::string> kScheduleWords = {"gpipe", "1f1b", "interleaved"};
const std::vector<std::string> kTierWords = {"none", "cpu", "nvme"};
const std::vector<std::string> kRecomputeWords = {"none", "selective", "full"};

[[noreturn]] void bad_word(const char* what, const std::string& s,
                           const std::vector<std::string>& allowed) {
  throw ConfigError(fmt::format("{}: got \"{}\", expected one of {}", what, s,
                                fmt::join(allowed, ", ")));
}

OffloadPlan offload_from_json(JsonObjectReader r) {
  OffloadPlan o;
  o.optimizer = offload_tier_from_string(r.get_enum("optimizer", kTierWords));
  o.gradients = offload_tier_from_string(r.get_enum("gradients", kTierWords));
  o.params = offload_tier_from_string(r.get_enum("params", kTierWords));
  r.finish();
  return o;
}

}  // namespace

ScheduleKind schedule_kind_from_string(const std::string& s) {
  if (s == "gpipe") return ScheduleKind::kGpipe;
  if (s == "1f1b") return ScheduleKind::kOneFOneB;
  if (s == "interleaved") return ScheduleKind::kInterleaved;
  bad_word("schedule", s, kScheduleWords);
}

OffloadTier offload_tier_from_string(const std::string& s) {
  if (s == "none") return OffloadTier::kNone;
  if (s == "cpu") return OffloadTier::kCpu;
  if (s == "nvme") return OffloadTier::kNvme;
  bad_word("offload tier", s, kTierWords);
}

Recompute recompute_from_string(const std::string& s) {
  if (s == "none") return Recompute::kNone;
  if (s == "selective") return Recompute::kSelective;
  if (s == "full") return Recompute::kFull;
  bad_word("recompute", s, kRecomputeWords);
}

Plan Plan::from_json(const Json& json, const std::string& source) {
  JsonObjectReader r(json, source);
  Plan p;
  const auto positive_int = [&r](const char* key) {
    const std::int64_t v = r.get_int(key);
    r.require_positive(key, static_cast<double>(v));
    r.require_at_most(key, static_cast<double>(v), limits::kDegree);
    return v;
  };
  p.tp = positive_int("tp");
  p.pp = positive_int("pp");
  p.dp = positive_int("dp");
  p.virtual_stages = positive_int("virtual_stages");
  p.micro_batch = positive_int("micro_batch");
  p.schedule = schedule_kind_from_string(r.get_enum("schedule", kScheduleWords));
  const std::int64_t zero = r.get_int("zero_stage");
  if (zero < 0 || zero > 3) r.fail("zero_stage", std::to_string(zero), "0, 1, 2 or 3");
  p.zero_stage = static_cast<int>(zero);
  p.offload = offload_from_json(r.get_object("offload"));
  p.recompute = recompute_from_string(r.get_enum("recompute", kRecomputeWords));
  p.sequence_parallel = r.get_bool("sequence_parallel");
  for (auto [key, field] : {std::pair{"first_stage_layers", &Plan::first_stage_layers},
                            std::pair{"last_stage_layers", &Plan::last_stage_layers}}) {
    p.*field = r.get_int_or(key, 0);
    r.require_non_negative(key, static_cast<double>(p.*field));
  }
  for (auto [key, field] : {std::pair{"embedding_counts_as_layer", &Plan::embedding_counts_as_layer},
                            std::pair{"loss_counts_as_layer", &Plan::loss_counts_as_layer}}) {
    if (r.has(key)) p.*field = r.get_bool(key);
  }
  // What `strata plan --out` writes around the plan; read by the tools, not by Plan.
  for (const char* extra : {"prediction", "model", "cluster", "train"}) r.allow(extra);
  r.finish();
  return p;
}

Plan Plan::load(const std::string& path) { return from_json(read_json_file(path), path); }

Json Plan::to_json() const {
  Json j{{"tp", tp},
         {"pp", pp},
         {"dp", dp},
         {"virtual_stages", virtual_stages},
         {"micro_batch", micro_batch},
         {"schedule", to_string(schedule)},
         {"zero_stage", zero_stage},
         {"offload",
          {{"optimizer", to_string(offload.optimizer)},
           {"gradients", to_string(offload.gradients)},
           {"params", to_string(offload.params)}}},
         {"recompute", to_string(recompute)},
         {"sequence_parallel", sequence_parallel}};
  if (first_stage_layers > 0) j["first_stage_layers"] = first_stage_layers;
  if (last_stage_layers > 0) j["last_stage_layers"] = last_stage_layers;
  if (embedding_counts_as_layer) j["embedding_counts_as_layer"] = true;
  if (loss_counts_as_layer) j["loss_counts_as_layer"] = true;
  return j;
}

std::int64_t Plan::micro_batches(const TrainSpec& train) const {
  if (dp <= 0 || micro_batch <= 0) {
    throw InfeasiblePlan(fmt::format("plan {}: dp = {} and micro_batch = {} must be >= 1",
                                     label(), dp, micro_batch));
  }
  return train.global_batch / (dp * micro_batch);
}

void Plan::check_against_model(const ModelSpec& model, const TrainSpec& train,
                               const std::string& source) const {
  const auto fail = [&source](const std::string& rule) {
    throw InfeasiblePlan(fmt::format("{}: {}", source, rule));
  };
  // Degrees first: every later rule divides by them.
  if (tp < 1 || pp < 1 || dp < 1 || virtual_stages < 1 || micro_batch < 1) {
    fail(fmt::format("tp, pp, dp, virtual_stages, micro_batch must all be >= 1, got "
                     "tp = {}, pp = {}, dp = {}, v = {}, micro_batch = {}",
                     tp, pp, dp, virtual_stages, micro_batch));
  }
  for (const std::string& why : {tensor_parallel_violation(model, tp),
                                 pipeline_violation(model, *this)}) {
    if (!why.empty()) fail(why);
  }
  if (train.global_batch % (dp * micro_batch) != 0) {
    fail(fmt::format("global_batch % (dp*micro_batch) = {} % ({}*{}) = {}, but every data-parallel "
                     "rank runs whole micro-batches",
                     train.global_batch, dp, micro_batch, train.global_batch % (dp * micro_batch)));
  }
  const std::int64_t m = train.global_batch / (dp * micro_batch);
  if (virtual_stages > 1 && schedule != ScheduleKind::kInterleaved) {
    fail(fmt::format("virtual_stages = {} > 1 needs schedule \"interleaved\", got \"{}\"",
                     virtual_stages, to_string(schedule)));
  }
  if (schedule == ScheduleKind::kInterleaved) {
    if (const std::string why = interleaved_violation(pp, m); !why.empty()) {
      fail(fmt::format("{} (m = global_batch/(dp*micro_batch) = {}/({}*{}) = {})", why,
                       train.global_batch, dp, micro_batch, m));
    }
  }
  if (zero_stage < 0 || zero_stage > 3) {
    fail(fmt::format("zero_stage = {}, expected 0, 1, 2 or 3", zero_stage));
  }
  if (offload.params != OffloadTier::kNone && zero_stage != 3) {
    fail(fmt::format("offload.params = \"{}\" needs zero_stage 3, got {}", to_string(offload.params),
                     zero_stage));
  }
  if (offload.gradients != OffloadTier::kNone && zero_stage < 2) {
    fail(fmt::format("offload.gradients = \"{}\" needs zero_stage >= 2, got {}",
                     to_string(offload.gradients), zero_stage));
  }
  if (sequence_parallel) {
    if (const std::string why = sequence_parallel_violation(model, tp); !why.empty()) fail(why);
  }
}

void Plan::check(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                 const std::string& source) const {
  check_against_model(model, train, source);
  const auto fail = [&source](const std::string& rule) {
    throw InfeasiblePlan(fmt::format("{}: {}", source, rule));
  };
  const std::int64_t world = world_size();
  if (world > cluster.total_gpus()) {
    fail(fmt::format("tp*pp*dp = {}*{}*{} = {} but the cluster {} has {} GPUs ({} nodes x {})", tp,
                     pp, dp, world, cluster.name, cluster.total_gpus(), cluster.nodes,
                     cluster.gpus_per_node));
  }
  if (tp > cluster.gpus_per_node) {
    fail(fmt::format("tp = {} > gpus_per_node = {} of cluster {}: tensor parallelism stays inside "
                     "a node",
                     tp, cluster.gpus_per_node, cluster.name));
  }
  if (!cluster.has_nvme()) {
    for (auto [kind, tier] : {std::pair{"optimizer", offload.optimizer},
                              std::pair{"gradients", offload.gradients},
                              std::pair{"params", offload.params}}) {
      if (tier == OffloadTier::kNvme) {
        fail(fmt::format("offload.{} = \"nvme\" but cluster {} has no NVMe tier (no \"nvme\" "
                         "block, or capacity_gb 0)",
                         kind, cluster.name));
      }
    }
  }
  if (world > cluster.gpus_per_node && world % cluster.gpus_per_node != 0) {
    fail(fmt::format("tp*pp*dp = {} spans nodes but is not a multiple of gpus_per_node = {} "
                     "(a plan spanning nodes uses whole nodes)",
                     world, cluster.gpus_per_node));
  }
  if (const std::string why = placement_violation(*this, cluster.gpus_per_node); !why.empty()) {
    fail(fmt::format("cluster {}: {}", cluster.name, why));
  }
}

std::string Plan::label() const {
  std::string s = fmt::format("t{} p{} d{} v{} b{} {} z{}", tp, pp, dp, virtual_stages, micro_batch,
                              to_string(schedule), zero_stage);
  if (offload.optimizer != OffloadTier::kNone || offload.gradients != OffloadTier::kNone ||
      offload.params != OffloadTier::kNone) {
    s += fmt::format(" off=o:{},g:{},p:{}", to_string(offload.optimizer),
                     to_string(offload.gradients), to_string(offload.params));
  }
  s += fmt::format(" rc={}", to_string(recompute));
  if (sequence_parallel) s += " sp";
  if (first_stage_layers > 0 || last_stage_layers > 0) {
    s += fmt::format(" layers={}..{}", first_stage_layers, last_stage_layers);
  }
  if (embedding_counts_as_layer) s += " emb=layer";
  if (loss_counts_as_layer) s += " loss=layer";
  return s;
}

}  // namespace strata
