// Sizing: how many GPUs of a cluster's node shape train a token budget by a deadline. Tries
// GPU counts that are whole nodes (gpus_per_node x k, up to the cluster's or a maximum), runs
// the planner's own search (search_plans) on each count it tries, and returns every count
// tried with its best plan, and the smallest count whose best plan meets the deadline.
//
// Which counts are tried: the largest first (if it misses the deadline no count does), then,
// between the largest count known to miss and the smallest known to meet, the count where a
// straight line through their throughputs reaches the rate the deadline needs (rounded up to
// whole nodes), until no count with a legal factorisation lies between them. Two facts
// decide without a search: a count below what the peak FLOP/s allows at 100% MFU misses (the
// cost model's MFU never exceeds 1), so no such count is searched, the largest neither; and
// a count with no legal t x p x d misses. Each count is tried once. What is assumed: among
// legal counts the best plan's throughput does not fall as the count grows; every count
// tried is returned so that the reader sees the evidence. When none meets the deadline, the
// count that would is estimated (SizingResult::needed_gpus).
//
// Deterministic; no printing, no files (the CLI prints: tools/strata/sizing_print.cc).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "planner/planner.h"

namespace strata {

struct SizingRequest {
  double tokens = 0;            // to train on, > 0
  double deadline_s = 0;        // wall-clock seconds, > 0
  std::int64_t max_gpus = 0;    // 0: the cluster's GPUs; else a cap (rounded down to whole nodes)
};

// One count the sizing looked at.
struct SizingTry {
  std::int64_t gpus = 0;
  // No legal t x p x d: not searched; the rules that dropped each factorisation (reason ->
  // count, as PlanSearchResult::dropped) and the nearest counts of the grid that have one
  // (0: none on that side).
  bool legal = true;
  std::map<std::string, std::int64_t> rule_drops;
  std::int64_t nearest_legal_below = 0;
  std::int64_t nearest_legal_above = 0;
  std::optional<PlanSearchResult> search;  // set when legal
  bool fits() const { return search && !search->top.empty(); }
  const ScoredPlan& best() const { return search->top.front(); }
  double train_seconds(double tokens) const;  // tokens / the best plan's tokens/s
  double gpu_hours(double tokens) const;      // gpus x train_seconds / 3600
  bool meets = false;                         // fits and train_seconds <= the deadline
};

struct SizingResult {
  std::vector<SizingTry> tries;            // in the order tried, each count once
  std::optional<std::size_t> smallest;     // index in tries of the smallest count that meets
  std::int64_t max_gpus = 0;               // the largest count of the grid
  // Counts below this miss the deadline even at 100% MFU (0: no such floor, the CPU backend).
  std::int64_t peak_floor_gpus = 0;
  double required_tokens_per_s = 0;        // tokens / deadline
  // When no count meets the deadline: the whole nodes' GPUs it needs at least, the larger of
  // the peak floor and the rate needed over the largest searched count's best tokens/s per
  // GPU (as if throughput grew in proportion to GPUs, which it rarely does beyond: more may
  // be needed); 0 when a count meets it or nothing was searched and there is no floor.
  std::int64_t needed_gpus = 0;
  // The try whose rate per GPU set needed_gpus; none when the floor did.
  std::optional<std::size_t> needed_from;
};

// ConfigError when the request is impossible: tokens or deadline not > 0, max_gpus below one
// node's GPUs or above the cluster's. `options.gpus` is ignored (each count sets it).
SizingResult size_for_deadline(const ModelSpec& model, const ClusterSpec& cluster,
                               const TrainSpec& train, const PlannerOptions& options,
                               const SizingRequest& request);

// The (t, p, d) rules that drop every factorisation of `gpus` (empty when one is legal).
std::map<std::string, std::int64_t> rule_drops_if_illegal(const ModelSpec& model,
                                                          const ClusterSpec& cluster,
                                                          const TrainSpec& train,
                                                          std::int64_t gpus,
                                                          const DegreeRules& rules);

// The nearest counts below and above `gpus` (multiples of gpus_per_node, or any count up to
// one node, within 1..max_gpus) that have a legal factorisation; 0 where there is none.
std::pair<std::int64_t, std::int64_t> nearest_legal_counts(const ModelSpec& model,
                                                           const ClusterSpec& cluster,
                                                           const TrainSpec& train,
                                                           std::int64_t gpus,
                                                           std::int64_t max_gpus,
                                                           const DegreeRules& rules);

}  // namespace strata
