// Candidate generators of the planner (see generators.h): legal values of one plan
// dimension at a time, in increasing order.
#include "planner/generators.h"

#include <fmt/format.h>

#include "cost_model/specs/backend_facts.h"
#include "cost_model/specs/partition.h"
#include "planner/planner.h"

namespace strata {

std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> small, large;
  for (std::int64_t i = 1; i * i <= n; ++i) {
    if (n % i != 0) continue;
    small.push_back(i);
    if (i != n / i) large.push_back(n / i);
  }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

std::vector<ParallelDegrees> parallel_degrees(const ModelSpec& model, const ClusterSpec& cluster,
                                              const TrainSpec& train, std::int64_t gpus,
                                              const DegreeRules& rules,
                                              std::map<std::string, std::int64_t>& dropped) {
  std::vector<ParallelDegrees> out;
  for (std::int64_t t : divisors(gpus)) {
    for (std::int64_t p : divisors(gpus / t)) {
      const std::int64_t d = gpus / (t * p);
      Plan plan;
      plan.tp = t;
      plan.pp = p;
      plan.dp = d;
      std::string reason;
      if (!tensor_parallel_violation(model, t).empty()) {
        reason = drop_reason::kTpDividesHeads;
      } else if (!rules.allow_tp_across_nodes &&
                 !placement_violation(plan, cluster.gpus_per_node).empty()) {
        reason = drop_reason::kTpWithinNode;
      } else if (const std::string why = rules.executor == nullptr
                                             ? std::string()
                                             : backend_violation(*rules.executor, model, train, t);
                 !why.empty()) {
        reason = fmt::format("{}{} backend: {}", drop_reason::kBackendPrefix,
                             rules.executor->name, why);
      } else if (!pipeline_violation(model, p, 1).empty()) {
        reason = drop_reason::kPpDividesLayers;
      } else if (train.global_batch % d != 0) {
        reason = drop_reason::kDpDividesBatch;
      }
      if (!reason.empty()) {
        ++dropped[reason];
        continue;
      }
      out.push_back({t, p, d});
    }
  }
  return out;
}

std::vector<std::int64_t> virtual_stage_options(const ModelSpec& model, std::int64_t pp,
                                                std::int64_t max_v) {
  if (pp == 1) return {1};
  std::vector<std::int64_t> out;
  for (std::int64_t v = 1; v <= max_v; ++v) {
    if (pipeline_violation(model, pp, v).empty()) out.push_back(v);
  }
  return out;
}

std::vector<std::int64_t> micro_batch_options(const TrainSpec& train, std::int64_t dp,
                                              std::int64_t max_b) {
  std::vector<std::int64_t> out;
  for (std::int64_t b : divisors(train.global_batch / dp)) {
    if (b <= max_b) out.push_back(b);
  }
  return out;
}

std::vector<ScheduleKind> schedule_options(std::int64_t pp, std::int64_t v, std::int64_t m) {
  if (pp == 1) return {ScheduleKind::kOneFOneB};
  if (v == 1) return {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB};
  if (interleaved_violation(pp, m).empty()) return {ScheduleKind::kInterleaved};
  return {};
}

std::vector<bool> sequence_parallel_options(const ModelSpec& model, std::int64_t tp) {
  if (!sequence_parallel_violation(model, tp).empty()) return {false};
  return {false, true};
}

std::vector<OffloadPlan> offload_options(int zero_stage, bool nvme_tier) {
  std::vector<OffloadTier> tiers = {OffloadTier::kNone, OffloadTier::kCpu};
  if (nvme_tier) tiers.push_back(OffloadTier::kNvme);
  // Tiers compare by depth through their enumerator order: none < cpu < nvme.
  std::vector<OffloadPlan> out;
  for (OffloadTier opt : tiers) {
    for (OffloadTier grad : tiers) {
      if (grad > opt || (grad != OffloadTier::kNone && zero_stage < 2)) continue;
      for (OffloadTier params : tiers) {
        if (params > grad || (params != OffloadTier::kNone && zero_stage < 3)) continue;
        out.push_back({opt, grad, params});
      }
    }
  }
  return out;
}

std::vector<Recompute> recompute_options() {
  return {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
}

void for_each_base_plan(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                        std::int64_t gpus, const DegreeRules& rules, std::int64_t max_v,
                        std::int64_t max_b, std::map<std::string, std::int64_t>& dropped,
                        const std::function<void(const Plan&)>& visit) {
  for (const ParallelDegrees& deg : parallel_degrees(model, cluster, train, gpus, rules, dropped)) {
    for (std::int64_t v : virtual_stage_options(model, deg.pp, max_v)) {
      for (std::int64_t b : micro_batch_options(train, deg.dp, max_b)) {
        const std::int64_t m = train.global_batch / (deg.dp * b);
        for (ScheduleKind schedule : schedule_options(deg.pp, v, m)) {
          for (int zero = 0; zero <= 3; ++zero) {
            for (bool sp : sequence_parallel_options(model, deg.tp)) {
              Plan plan;
              plan.tp = deg.tp;
              plan.pp = deg.pp;
              plan.dp = deg.dp;
              plan.virtual_stages = v;
              plan.micro_batch = b;
              plan.schedule = schedule;
              plan.zero_stage = zero;
              plan.sequence_parallel = sp;
              visit(plan);
            }
          }
        }
      }
    }
  }
}

bool offload_at_least(const OffloadPlan& a, const OffloadPlan& b) {
  return a.optimizer >= b.optimizer && a.gradients >= b.gradients && a.params >= b.params;
}

}  // namespace strata
