// The GPU-count search of planner/sizing.h: a handful of planner searches, chosen by
// interpolation between counts that miss and counts that meet the deadline.
#include "planner/sizing.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "cost_model/pricing/compute_model.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/step_report.h"
#include "planner/generators.h"

namespace strata {

double SizingTry::train_seconds(double tokens) const {
  return tokens / best().prediction.tokens_per_s;
}

double SizingTry::gpu_hours(double tokens) const {
  return static_cast<double>(gpus) * train_seconds(tokens) / 3600.0;
}

std::map<std::string, std::int64_t> rule_drops_if_illegal(const ModelSpec& model,
                                                          const ClusterSpec& cluster,
                                                          const TrainSpec& train,
                                                          std::int64_t gpus,
                                                          const DegreeRules& rules) {
  std::map<std::string, std::int64_t> dropped;
  if (!parallel_degrees(model, cluster, train, gpus, rules, dropped).empty()) {
    return {};
  }
  return dropped;
}

namespace {

// The counts sizing and the nearest-legal search walk: every count up to one node (a plan may
// use part of a node), then whole nodes.
bool on_grid(std::int64_t gpus, const ClusterSpec& cluster) {
  return gpus <= cluster.gpus_per_node || gpus % cluster.gpus_per_node == 0;
}

bool legal(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
           std::int64_t gpus, const DegreeRules& rules) {
  std::map<std::string, std::int64_t> dropped;
  return !parallel_degrees(model, cluster, train, gpus, rules, dropped).empty();
}

}  // namespace

std::pair<std::int64_t, std::int64_t> nearest_legal_counts(const ModelSpec& model,
                                                           const ClusterSpec& cluster,
                                                           const TrainSpec& train,
                                                           std::int64_t gpus,
                                                           std::int64_t max_gpus,
                                                           const DegreeRules& rules) {
  std::pair<std::int64_t, std::int64_t> nearest{0, 0};
  for (std::int64_t g = gpus - 1; g >= 1; --g) {
    if (on_grid(g, cluster) && legal(model, cluster, train, g, rules)) {
      nearest.first = g;
      break;
    }
  }
  for (std::int64_t g = gpus + 1; g <= max_gpus; ++g) {
    if (on_grid(g, cluster) && legal(model, cluster, train, g, rules)) {
      nearest.second = g;
      break;
    }
  }
  return nearest;
}

namespace {

class Sizing {
 public:
  Sizing(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
         const PlannerOptions& options, const SizingRequest& request, SizingResult& result)
      : model_(model), cluster_(cluster), train_(train), options_(options), request_(request),
        result_(result) {
    options_.cache = options.cache != nullptr ? options.cache : &cache_;
  }

  // Tries `gpus` (a count of the grid) and returns its index in result_.tries; a count tried
  // before is not tried again.
  std::size_t attempt(std::int64_t gpus) {
    for (std::size_t i = 0; i < result_.tries.size(); ++i) {
      if (result_.tries[i].gpus == gpus) return i;
    }
    SizingTry t;
    t.gpus = gpus;
    t.rule_drops = rule_drops_if_illegal(model_, cluster_, train_, gpus,
                                         degree_rules(options_, cluster_));
    t.legal = t.rule_drops.empty();
    if (t.legal) {
      PlannerOptions one = options_;
      one.gpus = gpus;
      t.search = search_plans(model_, cluster_, train_, one);
      t.meets = t.fits() && t.train_seconds(request_.tokens) <= request_.deadline_s;
    } else {
      std::tie(t.nearest_legal_below, t.nearest_legal_above) = nearest_legal_counts(
          model_, cluster_, train_, gpus, result_.max_gpus, degree_rules(options_, cluster_));
    }
    result_.tries.push_back(std::move(t));
    return result_.tries.size() - 1;
  }

  double tokens_per_s(std::size_t i) const {
    const SizingTry& t = result_.tries[i];
    return t.fits() ? t.best().prediction.tokens_per_s : 0.0;
  }

 private:
  const ModelSpec& model_;
  const ClusterSpec& cluster_;
  const TrainSpec& train_;
  PlannerOptions options_;
  const SizingRequest& request_;
  SizingResult& result_;
  PredictionCache cache_;  // shared by the searches: rank-class Programs do not depend on d
};

// Counts of whole nodes from one node to max_gpus.
std::int64_t round_up_to_node(double gpus, const ClusterSpec& cluster) {
  const double per_node = static_cast<double>(cluster.gpus_per_node);
  return static_cast<std::int64_t>(std::ceil(gpus / per_node)) * cluster.gpus_per_node;
}

}  // namespace

SizingResult size_for_deadline(const ModelSpec& model, const ClusterSpec& cluster,
                               const TrainSpec& train, const PlannerOptions& options,
                               const SizingRequest& request) {
  if (!(request.tokens > 0) || !std::isfinite(request.tokens)) {
    throw ConfigError(fmt::format("--tokens: value {} is not a finite number > 0", request.tokens));
  }
  if (!(request.deadline_s > 0) || !std::isfinite(request.deadline_s)) {
    throw ConfigError(fmt::format("--days / --deadline-hours: the deadline {} s is not a finite "
                                  "number > 0", request.deadline_s));
  }
  const std::int64_t per_node = cluster.gpus_per_node;
  const std::int64_t cap = request.max_gpus == 0 ? cluster.total_gpus() : request.max_gpus;
  if (cap < per_node || cap > cluster.total_gpus()) {
    throw ConfigError(fmt::format("--max-gpus: value {} is not in {}..{} (one node of cluster "
                                  "'{}' to all of it)",
                                  cap, per_node, cluster.total_gpus(), cluster.name));
  }
  SizingResult result;
  result.max_gpus = cap / per_node * per_node;
  result.required_tokens_per_s = request.tokens / request.deadline_s;
  if (cluster.backend == Backend::kCuda) {
    // At 100% MFU a GPU trains peak / (model FLOPs per token) tokens per second.
    const double flops_per_token = model_flops_without_recompute(model, train.global_batch) /
                                   static_cast<double>(train.global_batch * model.seq_len);
    const double peak = mfu_peak_flops(cluster, train, options.profile, 1.0);
    result.peak_floor_gpus = static_cast<std::int64_t>(
        std::ceil(result.required_tokens_per_s * flops_per_token / peak));
  }
  Sizing sizing(model, cluster, train, options, request, result);
  const std::int64_t floor_nodes_gpus =
      round_up_to_node(static_cast<double>(result.peak_floor_gpus), cluster);
  // When no count meets: at least the floor, and at least what the largest searched count's
  // rate per GPU would need (index `top`, or none).
  const auto missed = [&](std::optional<std::size_t> top) {
    result.needed_gpus = result.peak_floor_gpus > 0 ? floor_nodes_gpus : 0;
    if (top && sizing.tokens_per_s(*top) > 0) {
      const double per_gpu =
          sizing.tokens_per_s(*top) / static_cast<double>(result.tries[*top].gpus);
      const std::int64_t by_rate = round_up_to_node(result.required_tokens_per_s / per_gpu, cluster);
      if (by_rate > result.needed_gpus) {
        result.needed_gpus = by_rate;
        result.needed_from = *top;
      }
    }
    return result;
  };
  // Below the floor every count misses: nothing to search.
  if (result.peak_floor_gpus > result.max_gpus) return missed(std::nullopt);

  // The largest count first: when it misses, every count does (the assumption above).
  std::size_t top = sizing.attempt(result.max_gpus);
  if (!result.tries[top].legal) {
    const std::int64_t below = result.tries[top].nearest_legal_below;
    if (below == 0 || below < result.peak_floor_gpus) return missed(std::nullopt);
    top = sizing.attempt(below);
  }
  if (!result.tries[top].meets) return missed(top);
  std::size_t hi = top;  // the smallest count known to meet
  // The largest count known to miss: the peak floor's count just below it, or none (0).
  std::int64_t lo_gpus = std::max<std::int64_t>(0, floor_nodes_gpus - per_node);
  double lo_rate = 0;  // unknown below any search: the line then starts at the origin
  for (;;) {
    const std::int64_t hi_gpus = result.tries[hi].gpus;
    const double hi_rate = sizing.tokens_per_s(hi);
    // Where a straight line through (lo, lo_rate) and (hi, hi_rate) reaches the rate needed.
    const double slope = (hi_rate - lo_rate) / static_cast<double>(hi_gpus - lo_gpus);
    double guess = static_cast<double>(lo_gpus) +
                   (result.required_tokens_per_s - lo_rate) / std::max(slope, 1e-300);
    if (lo_gpus + per_node >= hi_gpus) break;  // no whole-node count between them
    const std::int64_t g = std::clamp(round_up_to_node(guess, cluster), lo_gpus + per_node,
                                      hi_gpus - per_node);
    std::size_t i = sizing.attempt(g);
    if (!result.tries[i].legal) {
      // The nearest legal count strictly between lo and hi, the closer one first.
      const auto [below, above] = std::pair{result.tries[i].nearest_legal_below,
                                            result.tries[i].nearest_legal_above};
      const bool below_ok = below > lo_gpus && below % per_node == 0;
      const bool above_ok = above < hi_gpus && above > 0;
      if (!below_ok && !above_ok) break;
      const std::int64_t next = !above_ok ? below
                                : !below_ok ? above
                                : (g - below <= above - g ? below : above);
      i = sizing.attempt(next);
    }
    if (result.tries[i].meets) {
      hi = i;
    } else {
      lo_gpus = result.tries[i].gpus;
      lo_rate = sizing.tokens_per_s(i);
    }
  }
  result.smallest = hi;
  return result;
}

}  // namespace strata
