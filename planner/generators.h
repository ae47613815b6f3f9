// The planner's candidate generators: small pure functions, each producing the legal values
// of one plan dimension given the ones chosen before it, in a fixed increasing order.
// Every combination they produce passes Plan::check (tests/planner check it); they do not
// score, rank or prune by memory (planner.cc does).
//
// Order of the dimensions: (t, p, d) -> v -> micro-batch b -> schedule -> ZeRO stage ->
// sequence parallel -> offload -> recompute.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cost_model/specs/backend_facts.h"
#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/train_spec.h"

namespace strata {

struct ParallelDegrees {
  std::int64_t tp = 1;
  std::int64_t pp = 1;
  std::int64_t dp = 1;
  bool operator==(const ParallelDegrees&) const = default;
};

// The rules of (t, p, d) beyond the model's and the batch's divisibility.
struct DegreeRules {
  bool allow_tp_across_nodes = false;  // skip the placement rule (Plan::check still has it)
  // The executor the plans are for (backend_facts.h): what it does not train is dropped.
  // Null: the plans price a published framework (conventions from a profile or the
  // options: cost_model.h, predicts_strata_executor), whose limits are not strata's.
  const BackendFacts* executor = nullptr;
};

// Divisors of n in increasing order (n >= 1).
std::vector<std::int64_t> divisors(std::int64_t n);

// Every factorisation gpus = t * p * d (t ascending, then p ascending) that satisfies the
// model and the cluster: tensor_parallel_violation is empty (t divides heads, hidden and
// ffn_hidden, and splits or replicates the KV heads: partition.h), the TP groups stay inside
// nodes (backend_facts.h: placement_violation; unless rules.allow_tp_across_nodes), the
// rules' executor trains the model at t (backend_facts.h: backend_violation), layers % p ==
// 0, global_batch % d == 0: what `strata run` accepts of the degrees. Each factorisation
// that breaks a rule is counted once in `dropped` under the first rule it breaks
// (drop_reason::* in planner.h; an executor's reason after kBackendPrefix).
std::vector<ParallelDegrees> parallel_degrees(const ModelSpec& model, const ClusterSpec& cluster,
                                              const TrainSpec& train, std::int64_t gpus,
                                              const DegreeRules& rules,
                                              std::map<std::string, std::int64_t>& dropped);

// v such that layers % (p * v) == 0 and v <= max_v: {1} when p == 1 (no pipeline, nothing
// to interleave).
std::vector<std::int64_t> virtual_stage_options(const ModelSpec& model, std::int64_t pp,
                                                std::int64_t max_v);

// Micro-batch sizes b dividing global_batch / d, b <= max_b.
std::vector<std::int64_t> micro_batch_options(const TrainSpec& train, std::int64_t dp,
                                              std::int64_t max_b);

// Schedules for p pipeline ranks, v chunks each, m micro-batches per pipeline:
//   p == 1: {1f1b} (no pipeline: the label is arbitrary, 1F1B is the one used);
//   v == 1: {gpipe, 1f1b};  v > 1: {interleaved} when m % p == 0, else none.
std::vector<ScheduleKind> schedule_options(std::int64_t pp, std::int64_t v, std::int64_t m);

// Sequence parallelism is only meaningful with tensor parallelism and splits the sequence
// over the t ranks: {false, true} when t > 1 and seq_len % t == 0, else {false}.
std::vector<bool> sequence_parallel_options(const ModelSpec& model, std::int64_t tp);

// Offload placements for a ZeRO stage. Plan::check's rules (gradients need ZeRO >= 2,
// parameters ZeRO-3) plus one of the generator's own: the state touched less often goes at
// least as deep (optimizer >= gradients >= parameters, with none < cpu < nvme), which is
// how ZeRO-Offload/Infinity place them; a placement with parameters deeper than the
// optimizer state moves the most-read bytes furthest for no memory gain. First entry is
// always "no offload"; entries are in lexicographic (optimizer, gradients, params) order.
// Without an NVMe tier (ClusterSpec::has_nvme) no placement names one.
std::vector<OffloadPlan> offload_options(int zero_stage, bool nvme_tier);

// {none, selective, full}: in this order, the cheapest first.
std::vector<Recompute> recompute_options();

// Calls `visit` with every base plan, in the generators' order: each legal (t, p, d, v, b,
// schedule, ZeRO stage, sequence parallel), with no offload and no recomputation. The
// memory variants of a base plan are offload_options(zero) x recompute_options().
// (t, p, d) triples that break a rule are counted in `dropped` (see parallel_degrees).
void for_each_base_plan(const ModelSpec& model, const ClusterSpec& cluster, const TrainSpec& train,
                        std::int64_t gpus, const DegreeRules& rules, std::int64_t max_v,
                        std::int64_t max_b, std::map<std::string, std::int64_t>& dropped,
                        const std::function<void(const Plan&)>& visit);

// True when every tier of `a` is at least as deep as the same tier of `b`.
bool offload_at_least(const OffloadPlan& a, const OffloadPlan& b);

}  // namespace strata
