// The planner: searches the plans of one model on (part of) one cluster, scores each with the
// cost model's predict(), drops those that break a rule or do not fit in memory (counting
// why), and ranks the rest by predicted throughput.
//
// The search is deterministic: candidates come from small generators in a fixed order and
// ties are broken by a total order on the plan, so the same inputs give byte-identical
// results. It deliberately does not print, load files or run anything: the CLI does that.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/profile.h"
#include "cost_model/specs/step_report.h"
#include "cost_model/specs/train_spec.h"
#include "planner/generators.h"

namespace strata {

struct PlannerOptions {
  std::int64_t gpus = 0;               // GPUs to use; 0 = the whole cluster
  std::int64_t top_k = 5;              // plans kept in the result
  bool allow_tp_across_nodes = false;  // t > gpus_per_node (Plan::check still forbids it today)
  std::int64_t max_micro_batch = 16;   // largest micro-batch tried (sequences)
  std::int64_t max_virtual_stages = 8; // largest v tried for the interleaved schedule
  const Profile* profile = nullptr;    // calibrated rates for predict(); not owned
  CostModelOptions cost;               // conventions and sharing (strata select: node_ranks)
  // Score every generated plan instead of skipping the ones a faster fitting variant
  // dominates (see planner.cc); implies replay_all. For tests of the pruning, far slower on
  // large clusters.
  bool exhaustive = false;
  // Replay every plan that fits instead of stopping at the first whose step-time bound is
  // already slower than the k-th best (see planner.cc): the same result, slower; for tests.
  bool replay_all = false;
  // Drop a plan whose memory floor (predict_device_memory_floor: a lower bound of its
  // estimate, no Program walked) already exceeds the device, before walking it; the closest
  // misfit is then found among the walked ones and those whose floor overshoots no more than
  // it does (see planner.cc). False walks every plan: the same result, slower; for tests.
  bool memory_floor = true;
  // Shared by several searches of one model and cluster (sizing tries several GPU counts);
  // null: each search keeps its own. Not owned, not thread-safe.
  PredictionCache* cache = nullptr;
  // Threads scoring plans: 0 = the machine's hardware threads. The result does not depend on
  // it (planner_search_test): each thread scores its share of the base plans with caches of
  // its own, and the shares are merged before the ranking, which orders plans totally.
  int threads = 0;
};

struct ScoredPlan {
  Plan plan;
  Prediction prediction;
};

// How much a plan overshoots the memory it was given, per tier (bytes over; 0 when it fits).
struct MemoryOvershoot {
  double device_bytes = 0;  // worst rank's device bytes - device memory
  double host_bytes = 0;    // host bytes of the fullest node - its usable host memory
  double nvme_bytes = 0;    // NVMe bytes of the fullest node - NVMe capacity per node
  bool fits() const { return device_bytes <= 0 && host_bytes <= 0 && nvme_bytes <= 0; }
  // The single figure "closest plan" is judged by: the sum of the positive overshoots.
  double total() const;
};

// Reason keys used in PlanSearchResult::dropped (rules first, then memory tiers).
namespace drop_reason {
inline constexpr const char* kTpDividesHeads = "t does not divide heads or ffn_hidden";
inline constexpr const char* kTpWithinNode = "a TP group would span nodes";
// Followed by the backend's name and its reason (backend_facts.h: backend_violation).
inline constexpr const char* kBackendPrefix = "the executor does not run it on the ";
inline constexpr const char* kPpDividesLayers = "layers not divisible by p";
inline constexpr const char* kDpDividesBatch = "global batch not divisible by d";
inline constexpr const char* kPlanCheck = "rejected by Plan::check";
inline constexpr const char* kDeviceMemory = "device memory exceeded";
inline constexpr const char* kHostMemory = "host memory exceeded";
inline constexpr const char* kNvmeCapacity = "NVMe capacity exceeded";
inline constexpr const char* kDeadlock = "its Program could deadlock";
}  // namespace drop_reason

struct PlanSearchResult {
  std::int64_t gpus = 0;             // GPUs the search used
  std::vector<ScoredPlan> top;       // best first, at most options.top_k
  std::int64_t candidates = 0;       // plans generated (legal and in a searched family)
  std::int64_t scored = 0;           // plans predict() was called on
  std::int64_t fitting = 0;          // plans that fit in every tier
  std::int64_t pruned = 0;           // legal plans not scored because a faster variant fits
  // Scored plans whose memory estimate walked their Programs; the others the memory floor
  // dropped (PlannerOptions::memory_floor) or a rule rejected. Not shown: for tests.
  std::int64_t memory_walked = 0;
  std::map<std::string, std::int64_t> dropped;  // reason -> count (rules: (t,p,d) triples)
  // When nothing fits: the reason that dropped the most plans and the plan whose memory
  // overshoot (MemoryOvershoot::total) is the smallest.
  std::string top_reason;
  // The first plan dropped because its Program could deadlock, with the fault (the cycle's
  // ops, rank by rank); empty when none was.
  std::string deadlock_example;
  std::optional<ScoredPlan> closest;
  std::optional<MemoryOvershoot> closest_overshoot;
  // Every t x p x d = gpus broke a rule of the model, the cluster or the batch: nothing to
  // score, which is not "does not fit in memory".
  bool no_legal_factorisation() const { return candidates == 0; }
};

// The (t, p, d) rules of a search with `options` on `cluster`: strata's executor on the
// cluster's backend, unless the options or the profile price a published framework
// (predicts_strata_executor).
DegreeRules degree_rules(const PlannerOptions& options, const ClusterSpec& cluster);

// Everything above, for `gpus` (0: the cluster's) GPUs. Throws ConfigError when the request
// itself is impossible (gpus < 1, more GPUs than the cluster has, global batch < 1).
PlanSearchResult search_plans(const ModelSpec& model, const ClusterSpec& cluster,
                              const TrainSpec& train, const PlannerOptions& options = {});

// Memory overshoot of a prediction on a cluster when the plan uses `world_size` GPUs
// (ranks fill nodes in order, so a node holds min(world_size, gpus_per_node) ranks), against
// the usable memory: the device's headroom is in the prediction, the host's
// (host_headroom_for) comes off each node's.
MemoryOvershoot memory_overshoot(const Prediction& prediction, const ClusterSpec& cluster,
                                 std::int64_t world_size);

// The total order used to rank plans: higher tokens/s first, then the plan's own order
// (see plan_less) so equal throughputs are broken the same way every run.
bool ranks_before(const ScoredPlan& a, const ScoredPlan& b);
// A fixed lexicographic order on plans: t, p, d, v, b, schedule, ZeRO, offload, recompute, sp.
bool plan_less(const Plan& a, const Plan& b);

}  // namespace strata
