// The levers of a plan (see levers.h).
#include "planner/levers.h"

#include <algorithm>

#include <fmt/format.h>

#include "cost_model/specs/backend_facts.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/partition.h"
#include "planner/planner.h"
#include "planner/stage_balance.h"

namespace strata {
namespace {

class LeverSearch {
 public:
  LeverSearch(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
              const Profile* profile, const CostModelOptions& options)
      : model_(model), cluster_(cluster), train_(train), profile_(profile), options_(options),
        strata_executor_(predicts_strata_executor(profile, options)) {}

  // Keeps the faster of `best` and `plan` (when `plan` runs and fits) as lever `name`.
  void consider(std::optional<Lever>& best, const std::string& name, const std::string& change,
                const Plan& plan) {
    try {
      plan.check(model_, cluster_, train_);
    } catch (const InfeasiblePlan&) {
      return;
    }
    if (strata_executor_ && !runnable_violation(model_, train_, plan, cluster_).empty()) return;
    const Prediction p = predict(model_, cluster_, train_, plan, profile_, options_, cache_);
    if (!memory_overshoot(p, cluster_, plan.world_size()).fits()) return;
    if (best && best->tokens_per_s >= p.tokens_per_s) return;
    best = Lever{name, change, plan, p.tokens_per_s};
  }

 private:
  const ModelSpec& model_;
  const ClusterSpec& cluster_;
  const TrainSpec& train_;
  const Profile* profile_;
  const CostModelOptions& options_;
  bool strata_executor_;
  PredictionCache cache_;
};

}  // namespace

std::vector<Lever> plan_levers(const ModelSpec& model, const ClusterSpec& cluster,
                               const TrainSpec& train, const Plan& plan, const Profile* profile,
                               const CostModelOptions& options) {
  LeverSearch search(model, cluster, train, profile, options);
  std::vector<Lever> levers;
  const auto keep = [&](const std::optional<Lever>& lever) {
    if (lever) levers.push_back(*lever);
  };

  std::optional<Lever> micro;
  if (plan.micro_batch % 2 == 0) {
    Plan more = plan;
    more.micro_batch /= 2;
    search.consider(micro, "micro-batches",
                    fmt::format("micro_batch {} -> {} ({} micro-batches)", plan.micro_batch,
                                more.micro_batch, more.micro_batches(train)),
                    more);
  }
  keep(micro);

  // The split that balances the stages best by the estimate of stage_balance.h, of the few
  // it ranks first, each priced.
  std::optional<Lever> split;
  if (plan.pp >= 2 && !plan.uneven_stages()) {
    const Prediction now = predict(model, cluster, train, plan, profile, options);
    if (now.pipeline_idle) {
      for (const Plan& uneven : balanced_splits(model, plan, now.pipeline_idle->stage_busy_s,
                                                kBalancedSplitsPriced)) {
        search.consider(split, "uneven split", split_description(model, uneven), uneven);
      }
    }
  }
  keep(split);

  std::optional<Lever> recompute;
  for (const Recompute cheaper : {Recompute::kNone, Recompute::kSelective}) {
    if (cheaper >= plan.recompute) continue;
    Plan less = plan;
    less.recompute = cheaper;
    search.consider(recompute, "recompute",
                    fmt::format("recompute {} -> {}", to_string(plan.recompute), to_string(cheaper)),
                    less);
  }
  keep(recompute);

  std::optional<Lever> offload;
  for (OffloadTier OffloadPlan::*tier :
       {&OffloadPlan::params, &OffloadPlan::gradients, &OffloadPlan::optimizer}) {
    if (plan.offload.*tier == OffloadTier::kNone) continue;
    Plan back = plan;
    back.offload.*tier = OffloadTier::kNone;
    const char* kind = tier == &OffloadPlan::params      ? "parameters"
                       : tier == &OffloadPlan::gradients ? "gradients"
                                                         : "optimizer state";
    search.consider(offload, "offload", fmt::format("the {} back on the device", kind), back);
  }
  if (!(plan.offload == OffloadPlan{})) {
    Plan none = plan;
    none.offload = OffloadPlan{};
    search.consider(offload, "offload", "nothing offloaded", none);
  }
  keep(offload);

  std::stable_sort(levers.begin(), levers.end(),
                   [](const Lever& a, const Lever& b) { return a.tokens_per_s > b.tokens_per_s; });
  return levers;
}

std::string lever_line(const std::vector<Lever>& levers, double tokens_per_s) {
  std::vector<std::string> gains;
  for (const Lever& lever : levers) {
    const double gain = lever.tokens_per_s / tokens_per_s - 1;
    if (gain <= 0) break;  // sorted: the rest gain nothing either
    gains.push_back(fmt::format("{} ({}) {:+.1f}%", lever.name, lever.change, 100 * gain));
  }
  if (gains.empty()) {
    return "lever: none of micro-batches, an uneven split, recompute or offload gains tokens/s "
           "here (each tried alone, where it runs and fits)";
  }
  std::string line = "lever that would gain most: " + gains.front() + " tokens/s";
  if (gains.size() > 1) {
    line += "; then";
    for (std::size_t i = 1; i < gains.size(); ++i) line += (i > 1 ? ", " : " ") + gains[i];
  }
  return line;
}

}  // namespace strata
