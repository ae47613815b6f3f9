// The plan search (see planner.h): walks the generators of generators.h, scores plans with
// the cost model, counts why plans are dropped, keeps the best top_k and the closest misfit.
//
// Scoring, cheapest first, every number exactly predict()'s. The memory half of the
// prediction (predict_memory) decides whether a plan fits. Its walk of the ranks' Programs is
// most of a search's time, and most candidates of a large model do not fit: a plan whose
// memory floor (predict_device_memory_floor: the model state and the first backward's
// in-flight activations, a lower bound of the walked figure) already exceeds the device is
// dropped unwalked, for the same reason and count as the walk would drop it. Only the
// closest misfit needs more of them: it is the least overshoot over every misfit, and a
// dropped plan's floor bounds its overshoot from below, so finish() walks the dropped plans
// whose floor overshoots no more than the closest one found (PlannerOptions::memory_floor
// false walks every plan: the same result). A plan that fits is ranked by
// predict()'s step time, the replay of its Program (predict_step_time, through the search's
// PredictionCache). Replays are skipped where they cannot change the result: the fitting
// plans are taken in the order of a lower bound of their step time (predict_step_time_bound:
// every rank's compute with the pipeline's fill and drain), and once the top k are full the
// search stops at the first plan whose bound is already slower than the k-th: every later
// plan's true step time is at least its bound, so none of them could rank (exact, like
// scoring every plan; PlannerOptions::replay_all replays them all). The plans kept in the
// result (the top k, the closest misfit) get their full Prediction at the end, through the
// same cache: predict() gives the same figures for any of them (tested).
//
// Pruning (off with PlannerOptions::exhaustive). Two facts of the cost model let the search
// skip plans that cannot win, for the same plan otherwise:
//   1. recomputation only adds time: none <= selective <= full;
//   2. moving a model state to a deeper tier only adds transfer time and frees no time.
// So for one (t, p, d, v, b, schedule, ZeRO, sp) the search tries offload placements from
// shallow to deep and recompute policies from cheap to costly, stops at the first policy
// that fits, and skips every placement at least as deep as one that already fits without
// recomputation. Offload is thus proposed only where a plan does not fit otherwise or where
// it lets a cheaper recomputation fit (and so may be faster). Skipped plans are counted in
// PlanSearchResult::pruned, not scored, not dropped.
#include "planner/planner.h"

#include <algorithm>
#include <exception>
#include <iterator>
#include <memory>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/errors.h"
#include "cost_model/checks/program_check.h"
#include "planner/generators.h"
#include "planner/stage_balance.h"

namespace strata {
namespace {

// The search state shared by the loops below; one per search_plans call.
class Search {
 public:
  Search(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
         const PlannerOptions& options, PlanSearchResult& result)
      : model_(model), cluster_(cluster), train_(train), options_(options), result_(result) {}

  std::int64_t gpus() const { return result_.gpus; }

  // Scores one plan; returns whether it fits (false also when a rule rejects it).
  bool score(const Plan& plan) {
    ++result_.scored;
    ScoredPlan scored{plan, {}};
    try {
      plan.check(model_, cluster_, train_);
      if (options_.memory_floor) {
        // floor <= the estimate, so floor - capacity <= its device overshoot (each rounded
        // step is monotone): over the device already, without the walk.
        const double over_floor =
            predict_device_memory_floor(model_, cluster_, train_, plan, options_.profile, options_.cost) -
            cluster_.device.memory_bytes;
        if (over_floor > 0) {
          ++result_.dropped[drop_reason::kDeviceMemory];
          unwalked_misfits_.push_back({plan, over_floor});
          return false;
        }
      }
      // Whether it fits needs the worst rank alone; the plans shown are predicted in full.
      scored.prediction = walk_memory(plan);
    } catch (const InfeasiblePlan&) {
      ++result_.dropped[drop_reason::kPlanCheck];
      return false;
    }
    const MemoryOvershoot over = memory_overshoot(scored.prediction, cluster_, result_.gpus);
    if (!over.fits()) {
      const char* reason = over.device_bytes > 0 ? drop_reason::kDeviceMemory
                           : over.host_bytes > 0 ? drop_reason::kHostMemory
                                                 : drop_reason::kNvmeCapacity;
      ++result_.dropped[reason];
      remember_closest(scored, over);
      return false;
    }
    ++result_.fitting;
    const double bound =
        options_.exhaustive || options_.replay_all
            ? 0.0
            : predict_step_time_bound(model_, cluster_, train_, plan, options_.profile, options_.cost, cache_);
    fitting_.push_back({std::move(scored), bound});
    return true;
  }

  // Ranks the fitting plans (see the file comment), then gives the kept plans their full
  // Predictions (the same step times: what they were ranked by).
  void finish() {
    find_closest_among_unwalked();
    std::stable_sort(fitting_.begin(), fitting_.end(),
                     [](const Candidate& a, const Candidate& b) {
                       return a.bound_s < b.bound_s ||
                              (a.bound_s == b.bound_s && plan_less(a.scored.plan, b.scored.plan));
                     });
    const auto k = static_cast<std::size_t>(std::max<std::int64_t>(options_.top_k, 0));
    const double tokens = static_cast<double>(train_.global_batch * model_.seq_len);
    for (Candidate& c : fitting_) {
      // tokens / step <= tokens / bound < the k-th's tokens/s: this plan and every later one
      // would rank after the k-th.
      if (k == 0 || (result_.top.size() == k &&
                     tokens / c.bound_s < result_.top.back().prediction.tokens_per_s)) {
        break;
      }
      Prediction& p = c.scored.prediction;
      try {
        p.step_time_s = predict_step_time(model_, cluster_, train_, c.scored.plan,
                                          options_.profile, options_.cost, cache_);
      } catch (const ProgramDeadlock& e) {
        ++result_.dropped[drop_reason::kDeadlock];
        if (result_.deadlock_example.empty()) {
          result_.deadlock_example = c.scored.plan.label() + ": " + e.what();
        }
        continue;
      }
      fill_throughput(model_, cluster_, train_, c.scored.plan, options_.profile, p);
      keep_top(std::move(c.scored));
    }
    fitting_.clear();
    for (ScoredPlan& kept : result_.top) kept.prediction = full_prediction(kept.plan);
    if (result_.closest) result_.closest->prediction = full_prediction(result_.closest->plan);
  }

  // Takes over what another search of a share of the base plans scored (`scored_by` is its
  // result), before finish(): the same state as if this search had scored them itself. The
  // closest misfit is a least element and the fitting plans are sorted before use, so the
  // order of the shares does not matter.
  void absorb(Search& other, const PlanSearchResult& scored_by) {
    result_.candidates += scored_by.candidates;
    result_.scored += scored_by.scored;
    result_.fitting += scored_by.fitting;
    result_.pruned += scored_by.pruned;
    result_.memory_walked += scored_by.memory_walked;
    for (const auto& [reason, count] : scored_by.dropped) result_.dropped[reason] += count;
    if (scored_by.closest) remember_closest(*scored_by.closest, *scored_by.closest_overshoot);
    std::move(other.fitting_.begin(), other.fitting_.end(), std::back_inserter(fitting_));
    std::move(other.unwalked_misfits_.begin(), other.unwalked_misfits_.end(),
              std::back_inserter(unwalked_misfits_));
    other.fitting_.clear();
    other.unwalked_misfits_.clear();
  }

 private:
  struct Candidate {
    ScoredPlan scored;  // its memory; its step time once replayed
    double bound_s = 0;
  };

  // A plan the memory floor dropped, and that floor's device overshoot: a lower bound of
  // its MemoryOvershoot::total (the device's share of it, the other tiers' >= 0).
  struct UnwalkedMisfit {
    Plan plan;
    double over_floor = 0;
  };

  Prediction walk_memory(const Plan& plan) {
    ++result_.memory_walked;
    return predict_memory(model_, cluster_, train_, plan, options_.profile, options_.cost,
                          MemoryRanks::kWorstOnly, &programs_);
  }

  // The closest misfit is the least (MemoryOvershoot::total, plan_less) over every misfit,
  // whatever order they come in. A plan the floor dropped has a total >= its floor's
  // overshoot, so only those whose floor overshoots no more than the closest walked so far
  // can be or tie it: they are walked, least floor first, until the next floor is above it.
  void find_closest_among_unwalked() {
    std::sort(unwalked_misfits_.begin(), unwalked_misfits_.end(),
              [](const UnwalkedMisfit& a, const UnwalkedMisfit& b) {
                return a.over_floor < b.over_floor ||
                       (a.over_floor == b.over_floor && plan_less(a.plan, b.plan));
              });
    for (const UnwalkedMisfit& misfit : unwalked_misfits_) {
      if (result_.closest_overshoot && misfit.over_floor > result_.closest_overshoot->total()) break;
      ScoredPlan scored{misfit.plan, {}};
      try {
        scored.prediction = walk_memory(misfit.plan);
      } catch (const InfeasiblePlan&) {
        continue;  // not a misfit the walk could report (the floor's checks are the walk's)
      }
      remember_closest(scored, memory_overshoot(scored.prediction, cluster_, result_.gpus));
    }
    unwalked_misfits_.clear();
  }

  Prediction full_prediction(const Plan& plan) {
    return predict(model_, cluster_, train_, plan, options_.profile, options_.cost, cache_);
  }

  void keep_top(ScoredPlan scored) {
    auto& top = result_.top;
    const auto k = static_cast<std::size_t>(std::max<std::int64_t>(options_.top_k, 0));
    if (top.size() == k && (k == 0 || !ranks_before(scored, top.back()))) return;
    top.insert(std::upper_bound(top.begin(), top.end(), scored, ranks_before), std::move(scored));
    if (top.size() > k) top.pop_back();
  }

  void remember_closest(const ScoredPlan& scored, const MemoryOvershoot& over) {
    if (result_.closest_overshoot) {
      const double best = result_.closest_overshoot->total();
      if (over.total() > best) return;
      if (over.total() == best && !plan_less(scored.plan, result_.closest->plan)) return;
    }
    result_.closest = scored;
    result_.closest_overshoot = over;
  }

  const ModelSpec& model_;
  const ClusterSpec& cluster_;
  const TrainSpec& train_;
  const PlannerOptions& options_;
  PlanSearchResult& result_;
  PredictionCache own_cache_;
  PredictionCache& cache_ = options_.cache != nullptr ? *options_.cache : own_cache_;
  RankProgramCache programs_;  // the memory walks' Programs
  std::vector<Candidate> fitting_;
  std::vector<UnwalkedMisfit> unwalked_misfits_;  // dropped by the memory floor
};

// All memory variants (offload x recompute) of one plan whose other fields are set.
void search_memory_variants(Plan plan, bool nvme_tier, const PlannerOptions& options,
                            Search& search, PlanSearchResult& result) {
  const std::vector<OffloadPlan> placements = offload_options(plan.zero_stage, nvme_tier);
  const std::vector<Recompute> policies = recompute_options();
  result.candidates += static_cast<std::int64_t>(placements.size() * policies.size());
  std::vector<OffloadPlan> fit_without_recompute;
  for (const OffloadPlan& placement : placements) {
    const bool dominated = std::any_of(
        fit_without_recompute.begin(), fit_without_recompute.end(),
        [&](const OffloadPlan& fitting) { return offload_at_least(placement, fitting); });
    if (dominated && !options.exhaustive) {
      result.pruned += static_cast<std::int64_t>(policies.size());
      continue;
    }
    plan.offload = placement;
    for (std::size_t i = 0; i < policies.size(); ++i) {
      plan.recompute = policies[i];
      if (!search.score(plan)) continue;
      if (plan.recompute == Recompute::kNone) fit_without_recompute.push_back(placement);
      if (!options.exhaustive) {
        result.pruned += static_cast<std::int64_t>(policies.size() - i - 1);
        break;
      }
    }
  }
}

void check_request(const ClusterSpec& cluster, const TrainSpec& train, std::int64_t gpus) {
  if (gpus < 1 || gpus > cluster.total_gpus()) {
    throw ConfigError(fmt::format("--gpus: value {} is not in 1..{} (the GPUs of cluster '{}')",
                                  gpus, cluster.total_gpus(), cluster.name));
  }
  if (gpus > cluster.gpus_per_node && gpus % cluster.gpus_per_node != 0) {
    throw ConfigError(fmt::format(
        "--gpus: value {} spans nodes but is not a multiple of the {} GPUs per node of '{}'",
        gpus, cluster.gpus_per_node, cluster.name));
  }
  if (train.global_batch < 1) {
    throw ConfigError(fmt::format("train: global_batch: value {} is not >= 1", train.global_batch));
  }
}

std::size_t search_threads(const PlannerOptions& options) {
  if (options.threads < 0) {
    throw ConfigError(fmt::format("planner threads: value {} is not >= 0", options.threads));
  }
  if (options.threads > 0) return static_cast<std::size_t>(options.threads);
  return std::max<std::size_t>(std::thread::hardware_concurrency(), 1);
}

// Scores `bases` on `threads` threads, thread i taking bases i, i + threads, ... (neighbouring
// bases cost alike, so the shares do too), each with a Search and caches of its own (the
// cost model's caches are not thread-safe), then hands everything to `into`. An exception
// is rethrown as the serial search would have met it: the one of the earliest base plan.
void score_in_threads(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                      const PlannerOptions& options, const std::vector<Plan>& bases,
                      std::size_t threads, Search& into) {
  PlannerOptions own = options;
  own.cache = nullptr;
  std::vector<PlanSearchResult> parts(threads);
  std::vector<std::unique_ptr<Search>> searches;
  for (PlanSearchResult& part : parts) {
    part.gpus = into.gpus();
    searches.push_back(std::make_unique<Search>(model, cluster, train, own, part));
  }
  std::vector<std::exception_ptr> errors(threads);
  std::vector<std::size_t> failed_at(threads, bases.size());
  {
    std::vector<std::jthread> workers;
    for (std::size_t t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (std::size_t i = t; i < bases.size(); i += threads) {
          try {
            search_memory_variants(bases[i], cluster.has_nvme(), own, *searches[t], parts[t]);
          } catch (...) {
            errors[t] = std::current_exception();
            failed_at[t] = i;
            return;
          }
        }
      });
    }
  }  // joined
  const auto first = std::min_element(failed_at.begin(), failed_at.end()) - failed_at.begin();
  if (errors[static_cast<std::size_t>(first)]) std::rethrow_exception(errors[static_cast<std::size_t>(first)]);
  for (std::size_t t = 0; t < threads; ++t) into.absorb(*searches[t], parts[t]);
}

}  // namespace

DegreeRules degree_rules(const PlannerOptions& options, const ClusterSpec& cluster) {
  DegreeRules rules;
  rules.allow_tp_across_nodes = options.allow_tp_across_nodes;
  if (predicts_strata_executor(options.profile, options.cost)) {
    rules.executor = &backend_facts(cluster.backend);
  }
  return rules;
}

double MemoryOvershoot::total() const {
  return std::max(device_bytes, 0.0) + std::max(host_bytes, 0.0) + std::max(nvme_bytes, 0.0);
}

MemoryOvershoot memory_overshoot(const Prediction& prediction, const ClusterSpec& cluster,
                                 std::int64_t world_size) {
  // Host and NVMe bytes are per GPU (memory_model.h); a node holds up to gpus_per_node ranks.
  // The device's headroom is in the prediction's device bytes (memory_model.h); the host's is
  // taken off what the node has (host_headroom_for).
  const std::int64_t node_ranks = std::min(world_size, cluster.gpus_per_node);
  const double ranks_per_node = static_cast<double>(node_ranks);
  MemoryOvershoot over;
  over.device_bytes = prediction.memory_bytes.device - cluster.device.memory_bytes;
  over.host_bytes = prediction.memory_bytes.host * ranks_per_node -
                    usable_host_bytes(cluster.host.memory_bytes, node_ranks, host_headroom_for(cluster));
  over.nvme_bytes = prediction.memory_bytes.nvme * ranks_per_node - cluster.nvme.capacity_bytes;
  return over;
}

bool plan_less(const Plan& a, const Plan& b) {
  auto key = [](const Plan& p) {
    return std::tuple(p.tp, p.pp, p.dp, p.virtual_stages, p.micro_batch,
                      static_cast<int>(p.schedule), p.zero_stage,
                      static_cast<int>(p.offload.optimizer), static_cast<int>(p.offload.gradients),
                      static_cast<int>(p.offload.params), static_cast<int>(p.recompute),
                      p.sequence_parallel);
  };
  return key(a) < key(b);
}

bool ranks_before(const ScoredPlan& a, const ScoredPlan& b) {
  // Faster first; among equally fast plans the one leaving more device memory free, then
  // the fixed plan order, so ties never depend on the order plans were scored in.
  if (a.prediction.tokens_per_s != b.prediction.tokens_per_s) {
    return a.prediction.tokens_per_s > b.prediction.tokens_per_s;
  }
  if (a.prediction.memory_bytes.device != b.prediction.memory_bytes.device) {
    return a.prediction.memory_bytes.device < b.prediction.memory_bytes.device;
  }
  return plan_less(a.plan, b.plan);
}

PlanSearchResult search_plans(const ModelSpec& model, const ClusterSpec& cluster,
                              const TrainSpec& train, const PlannerOptions& options) {
  PlanSearchResult result;
  result.gpus = options.gpus == 0 ? cluster.total_gpus() : options.gpus;
  check_request(cluster, train, result.gpus);
  Search search(model, cluster, train, options, result);

  std::vector<Plan> bases;
  for_each_base_plan(model, cluster, train, result.gpus, degree_rules(options, cluster),
                     options.max_virtual_stages, options.max_micro_batch, result.dropped,
                     [&](const Plan& plan) { bases.push_back(plan); });
  const std::size_t threads = std::min(search_threads(options), std::max<std::size_t>(bases.size(), 1));
  if (threads == 1) {
    for (const Plan& plan : bases) {
      search_memory_variants(plan, cluster.has_nvme(), options, search, result);
    }
  } else {
    score_in_threads(model, cluster, train, options, bases, threads, search);
  }
  search.finish();

  // Uneven splits (stage_balance.h): each kept plan with an even pipeline has its few best
  // balanced variants priced, those faster than it scored like any plan, and the ranking is
  // finished again with them, so a split is proposed wherever it is faster than the even one.
  std::vector<Plan> splits;
  PredictionCache split_cache;
  for (const ScoredPlan& kept : result.top) {
    if (!kept.prediction.pipeline_idle) continue;
    for (Plan& split : balanced_splits(model, kept.plan, kept.prediction.pipeline_idle->stage_busy_s,
                                       kBalancedSplitsPriced)) {
      try {
        const Prediction p = predict(model, cluster, train, split, options.profile, options.cost,
                                     split_cache);
        if (p.tokens_per_s > kept.prediction.tokens_per_s) splits.push_back(std::move(split));
      } catch (const InfeasiblePlan&) {
        // A split the plan rules refuse is not proposed.
      }
    }
  }
  if (!splits.empty()) {
    result.candidates += static_cast<std::int64_t>(splits.size());
    for (const Plan& split : splits) search.score(split);
    search.finish();
  }

  // The reason that dropped the most plans (the first in key order on ties).
  std::int64_t most = 0;
  for (const auto& [reason, count] : result.dropped) {
    if (count > most) {
      most = count;
      result.top_reason = reason;
    }
  }
  return result;
}

}  // namespace strata
