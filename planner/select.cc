// The multi-model scheduler (see select.h).
#include "planner/select.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/backend_facts.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/errors.h"
#include "planner/generators.h"
#include "planner/planner.h"

namespace strata {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The best spilled single-device plan: ZeRO-3 with the parameters, gradients and optimizer
// state on the host (what Hydra does to every shard), the fastest micro-batch and
// recomputation that fit.
std::optional<JobWay> spilled_way(const Job& job, const ClusterSpec& cluster,
                                  const SelectOptions& options, const CostModelOptions& cost) {
  std::optional<JobWay> best;
  for (std::int64_t b : micro_batch_options(job.train, 1, options.max_micro_batch)) {
    for (Recompute rc : recompute_options()) {
      Plan plan;
      plan.micro_batch = b;
      plan.zero_stage = 3;
      plan.offload = {OffloadTier::kCpu, OffloadTier::kCpu, OffloadTier::kCpu};
      plan.recompute = rc;
      try {
        plan.check(job.model, cluster, job.train);
      } catch (const InfeasiblePlan&) {
        continue;
      }
      // What `strata run` would refuse is not a way (the search's plans are filtered alike:
      // generators.h).
      if (!runnable_violation(job.model, job.train, plan, cluster).empty()) continue;
      const Prediction p = predict(job.model, cluster, job.train, plan, options.profile, cost);
      if (!memory_overshoot(p, cluster, 1).fits()) continue;
      if (best && best->step_s <= p.step_time_s) continue;
      JobWay way;
      way.plan = plan;
      way.devices = 1;
      way.spilled = true;
      way.step_s = p.step_time_s;
      way.prediction = p;
      best = way;
      break;  // cheaper recomputation first: the first that fits is the fastest of this b
    }
  }
  return best;
}

struct Gang {
  double start = 0;
  std::vector<std::int64_t> devices;
};

// The devices of `node`, in index order.
std::vector<std::int64_t> node_devices(const SelectDevices& layout, std::int64_t node) {
  std::vector<std::int64_t> out;
  const std::int64_t first = node * layout.per_node();
  for (std::int64_t d = first; d < std::min(first + layout.per_node(), layout.devices); ++d) out.push_back(d);
  return out;
}

double all_free_at(const std::vector<double>& free_at, const std::vector<std::int64_t>& devices) {
  double t = 0;
  for (std::int64_t d : devices) t = std::max(t, free_at[static_cast<std::size_t>(d)]);
  return t;
}

// Where a way of k devices runs, and from when: the placement its prediction priced. A way
// that fits a node runs inside one node (the planner priced its every group on the intra-node
// link): the node whose k earliest-free devices are free first, ties to the lower node, then
// the lower device. A wider way (k a multiple of G, as the planner asks: planner.cc
// check_request) takes k / G whole nodes, those free first, its ranks node by node, so rank r
// is on its (r / G)-th node: the layout collectives.h's group_link prices, TP groups inside a
// node and the groups that span nodes on the inter-node link.
Gang earliest_gang(const std::vector<double>& free_at, std::int64_t k, const SelectDevices& layout) {
  const std::int64_t per_node = layout.per_node();
  std::optional<Gang> best;
  if (k <= per_node) {
    for (std::int64_t n = 0; n < layout.nodes(); ++n) {
      std::vector<std::int64_t> devices = node_devices(layout, n);
      if (static_cast<std::int64_t>(devices.size()) < k) continue;
      std::stable_sort(devices.begin(), devices.end(), [&](std::int64_t a, std::int64_t b) {
        return free_at[static_cast<std::size_t>(a)] < free_at[static_cast<std::size_t>(b)];
      });
      devices.resize(static_cast<std::size_t>(k));
      std::sort(devices.begin(), devices.end());
      const double start = all_free_at(free_at, devices);
      if (!best || start < best->start) best = Gang{start, std::move(devices)};
    }
  } else if (k % per_node == 0) {
    std::vector<std::int64_t> whole;  // nodes holding G of the D devices
    for (std::int64_t n = 0; n < layout.nodes(); ++n) {
      if (static_cast<std::int64_t>(node_devices(layout, n).size()) == per_node) whole.push_back(n);
    }
    if (static_cast<std::int64_t>(whole.size()) >= k / per_node) {
      std::stable_sort(whole.begin(), whole.end(), [&](std::int64_t a, std::int64_t b) {
        return all_free_at(free_at, node_devices(layout, a)) < all_free_at(free_at, node_devices(layout, b));
      });
      whole.resize(static_cast<std::size_t>(k / per_node));
      std::sort(whole.begin(), whole.end());
      Gang g;
      for (std::int64_t n : whole) {
        for (std::int64_t d : node_devices(layout, n)) g.devices.push_back(d);
      }
      g.start = all_free_at(free_at, g.devices);
      best = std::move(g);
    }
  }
  if (!best) {
    throw std::logic_error(fmt::format("select: a way of {} devices has no place on {} devices "
                                       "of {} per node", k, layout.devices, per_node));
  }
  return *best;
}

// List scheduling: jobs in `order`, each on the earliest k free devices.
double list_schedule(const std::vector<std::size_t>& order, const std::vector<const JobWay*>& way,
                     const SelectDevices& layout, std::vector<ScheduleSlice>* slices,
                     const std::vector<Job>& jobs) {
  std::vector<double> free_at(static_cast<std::size_t>(layout.devices), 0.0);
  double makespan = 0;
  for (std::size_t j : order) {
    const JobWay& w = *way[j];
    const Gang g = earliest_gang(free_at, w.devices, layout);
    const double end = g.start + w.duration_s;
    for (std::int64_t d : g.devices) free_at[static_cast<std::size_t>(d)] = end;
    makespan = std::max(makespan, end);
    if (slices != nullptr) {
      slices->push_back({j, g.devices, 0, jobs[j].train.steps, g.start, end});
    }
  }
  return makespan;
}

void sort_slices(std::vector<ScheduleSlice>& slices) {
  std::stable_sort(slices.begin(), slices.end(), [](const ScheduleSlice& a, const ScheduleSlice& b) {
    if (a.start_s != b.start_s) return a.start_s < b.start_s;
    return a.devices.front() < b.devices.front();
  });
}

// Per job, the ways not dominated by another (fewer or as many devices and as fast or faster).
std::vector<std::vector<std::size_t>> pareto_ways(const std::vector<JobWays>& ways) {
  std::vector<std::vector<std::size_t>> out;
  for (const JobWays& jw : ways) {
    std::vector<std::size_t> keep;
    for (std::size_t i = 0; i < jw.ways.size(); ++i) {
      bool dominated = false;
      for (std::size_t k = 0; k < jw.ways.size() && !dominated; ++k) {
        const JobWay& a = jw.ways[k];
        const JobWay& b = jw.ways[i];
        const bool no_worse = a.devices <= b.devices && a.duration_s <= b.duration_s;
        const bool better = a.devices < b.devices || a.duration_s < b.duration_s;
        dominated = k != i && no_worse && (better || k < i);
      }
      if (!dominated) keep.push_back(i);
    }
    out.push_back(std::move(keep));
  }
  return out;
}

SelectSchedule strata_schedule(const std::vector<Job>& jobs, const std::vector<JobWays>& ways,
                               const SelectDevices& layout) {
  const std::size_t n = jobs.size();
  std::vector<std::vector<std::size_t>> choices = pareto_ways(ways);
  // Too many combinations: each job keeps its least device-time way and its fastest.
  double combos = 1;
  for (const auto& c : choices) combos *= static_cast<double>(c.size());
  if (combos > 4096) {
    for (std::size_t j = 0; j < n; ++j) {
      const auto& jw = ways[j].ways;
      std::size_t least = choices[j].front(), fastest = choices[j].front();
      for (std::size_t i : choices[j]) {
        if (jw[i].device_time_s() < jw[least].device_time_s()) least = i;
        if (jw[i].duration_s < jw[fastest].duration_s) fastest = i;
      }
      choices[j] = least == fastest ? std::vector<std::size_t>{least} : std::vector<std::size_t>{least, fastest};
    }
    combos = 1;
    for (const auto& c : choices) combos *= static_cast<double>(c.size());
    if (combos > 4096) {
      for (auto& c : choices) c.resize(1);
    }
  }
  const bool every_order = n <= 7 && combos * 5040 <= 2e6;
  SelectSchedule best;
  best.makespan_s = kInf;
  std::vector<std::size_t> pick(n, 0);  // index into choices[j]
  std::vector<const JobWay*> way(n);
  while (true) {
    for (std::size_t j = 0; j < n; ++j) way[j] = &ways[j].ways[choices[j][pick[j]]];
    std::vector<std::vector<std::size_t>> orders;
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    if (every_order) {
      do orders.push_back(order);
      while (std::next_permutation(order.begin(), order.end()));
    } else {
      for (int kind = 0; kind < 2; ++kind) {
        std::vector<std::size_t> o = order;
        std::stable_sort(o.begin(), o.end(), [&](std::size_t a, std::size_t b) {
          return kind == 0 ? way[a]->device_time_s() > way[b]->device_time_s()
                           : way[a]->duration_s > way[b]->duration_s;
        });
        orders.push_back(std::move(o));
      }
    }
    for (const auto& o : orders) {
      const double makespan = list_schedule(o, way, layout, nullptr, jobs);
      if (makespan < best.makespan_s) {
        best.makespan_s = makespan;
        best.way_of_job.assign(n, 0);
        for (std::size_t j = 0; j < n; ++j) best.way_of_job[j] = choices[j][pick[j]];
        best.slices.clear();
        list_schedule(o, way, layout, &best.slices, jobs);
      }
    }
    std::size_t j = n;
    while (j > 0 && ++pick[j - 1] == choices[j - 1].size()) pick[--j] = 0;
    if (j == 0) break;
  }
  return best;
}

SelectSchedule lrtf_schedule(const std::vector<Job>& jobs, const std::vector<JobWays>& ways,
                             const SelectDevices& layout) {
  const std::int64_t devices = layout.devices;
  const std::size_t n = jobs.size();
  SelectSchedule s;
  s.way_of_job.assign(n, 0);
  std::vector<std::int64_t> left(n);
  std::vector<double> available(n, 0.0);  // when the job's last step ends
  for (std::size_t j = 0; j < n; ++j) {
    const auto& jw = ways[j].ways;
    std::optional<std::size_t> spilled;
    for (std::size_t i = 0; i < jw.size(); ++i) {
      if (jw[i].spilled && jw[i].devices == 1 && (!spilled || jw[i].step_s < jw[*spilled].step_s)) spilled = i;
    }
    if (!spilled) {
      throw InfeasiblePlan(fmt::format("policy lrtf: job '{}' has no spilled single-device way",
                                       jobs[j].name));
    }
    s.way_of_job[j] = *spilled;
    left[j] = jobs[j].train.steps;
  }
  std::vector<double> free_at(static_cast<std::size_t>(devices), 0.0);
  // A spilled job's state lives in its node's host memory between steps, so its steps stay
  // on the node of its first (moving it between nodes is a transfer nothing prices).
  std::vector<std::optional<std::int64_t>> node_of_job(n);
  std::int64_t steps_left = std::accumulate(left.begin(), left.end(), std::int64_t{0});
  while (steps_left > 0) {
    // The device free first (ties: lowest index).
    const auto d = static_cast<std::size_t>(
        std::min_element(free_at.begin(), free_at.end()) - free_at.begin());
    double t = free_at[d];
    if (t == kInf) throw std::logic_error("lrtf: steps left with no device to run them");
    const std::int64_t node = layout.node_of(static_cast<std::int64_t>(d));
    // The job with the longest remaining time among those free by t; if none, wait for one.
    std::optional<std::size_t> pick;
    while (!pick && t < kInf) {
      double next = kInf;
      for (std::size_t j = 0; j < n; ++j) {
        if (left[j] == 0 || (node_of_job[j] && *node_of_job[j] != node)) continue;
        if (available[j] > t) {
          next = std::min(next, available[j]);
          continue;
        }
        const double remaining = static_cast<double>(left[j]) * ways[j].ways[s.way_of_job[j]].step_s;
        const double best = pick ? static_cast<double>(left[*pick]) *
                                       ways[*pick].ways[s.way_of_job[*pick]].step_s
                                 : -1;
        if (remaining > best) pick = j;
      }
      if (!pick) t = next;
    }
    if (!pick) {  // every job left is another node's: this device is done
      free_at[d] = kInf;
      continue;
    }
    const std::size_t j = *pick;
    node_of_job[j] = node;
    const double step_s = ways[j].ways[s.way_of_job[j]].step_s;
    const std::int64_t step = jobs[j].train.steps - left[j];
    const double start = t;
    const double end = start + step_s;
    // One step; merged into the device's last slice when it continues the same job.
    ScheduleSlice* last = nullptr;
    for (auto it = s.slices.rbegin(); it != s.slices.rend(); ++it) {
      if (it->devices.front() == static_cast<std::int64_t>(d)) {
        last = &*it;
        break;
      }
    }
    if (last != nullptr && last->job == j && last->end_s == start &&
        last->first_step + last->steps == step) {
      last->steps += 1;
      last->end_s = end;
    } else {
      s.slices.push_back({j, {static_cast<std::int64_t>(d)}, step, 1, start, end});
    }
    free_at[d] = end;
    available[j] = end;
    --left[j];
    --steps_left;
    s.makespan_s = std::max(s.makespan_s, end);
  }
  return s;
}

// Every job on all D devices, its ranks in device order (node by node, as group_link prices).
SelectSchedule sequential_schedule(const std::vector<Job>& jobs, const std::vector<JobWays>& ways,
                                   std::int64_t devices) {
  SelectSchedule s;
  double t = 0;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const auto& jw = ways[j].ways;
    std::optional<std::size_t> best;
    for (std::size_t i = 0; i < jw.size(); ++i) {
      if (jw[i].devices == devices && (!best || jw[i].duration_s < jw[*best].duration_s)) best = i;
    }
    if (!best) {
      throw InfeasiblePlan(fmt::format("policy sequential: job '{}' has no way on all {} devices",
                                       jobs[j].name, devices));
    }
    s.way_of_job.push_back(*best);
    std::vector<std::int64_t> all(static_cast<std::size_t>(devices));
    std::iota(all.begin(), all.end(), 0);
    const double end = t + jw[*best].duration_s;
    s.slices.push_back({j, all, 0, jobs[j].train.steps, t, end});
    t = end;
  }
  s.makespan_s = t;
  return s;
}

}  // namespace

std::vector<JobWays> job_ways(const std::vector<Job>& jobs, const ClusterSpec& cluster,
                              const SelectOptions& options) {
  if (options.devices < 1 || options.devices > cluster.total_gpus()) {
    throw ConfigError(fmt::format("--gpus: value {} is not in 1..{} (the devices of cluster '{}')",
                                  options.devices, cluster.total_gpus(), cluster.name));
  }
  ClusterSpec budgeted = cluster;
  if (options.device_budget_bytes > 0) budgeted.device.memory_bytes = options.device_budget_bytes;
  // Every way is priced as if its node's devices among the D were all busy (other jobs run
  // beside it): all D on one node, G of them per node across several.
  CostModelOptions cost;
  cost.node_ranks = std::min(options.devices, cluster.gpus_per_node);
  std::vector<JobWays> out;
  // A grid's jobs differ in learning rate or seed more often than in anything the cost model
  // reads (cost_model.h: priced_train): such jobs share their priced ways.
  std::map<std::string, std::size_t> priced_as;  // model and priced train -> first job's index
  for (const Job& job : jobs) {
    const std::string key =
        job.model.to_json().dump() + priced_train(job.train).to_json().dump();
    if (const auto same = priced_as.find(key); same != priced_as.end()) {
      JobWays jw = out[same->second];
      for (JobWay& w : jw.ways) w.duration_s = static_cast<double>(job.train.steps) * w.step_s;
      std::stable_sort(jw.ways.begin(), jw.ways.end(),
                       [](const JobWay& a, const JobWay& b) { return a.duration_s < b.duration_s; });
      out.push_back(std::move(jw));
      continue;
    }
    priced_as.emplace(key, out.size());
    JobWays jw;
    for (std::int64_t k = 1; k <= options.devices; ++k) {
      PlannerOptions planner;
      planner.gpus = k;
      planner.top_k = 1;
      planner.profile = options.profile;
      planner.cost = cost;
      planner.max_micro_batch = options.max_micro_batch;
      PlanSearchResult found;
      try {
        found = search_plans(job.model, budgeted, job.train, planner);
      } catch (const ConfigError&) {
        continue;  // k devices is not a legal request on this cluster
      }
      if (found.top.empty()) continue;
      JobWay way;
      way.plan = found.top.front().plan;
      way.devices = k;
      way.prediction = found.top.front().prediction;
      way.step_s = way.prediction.step_time_s;
      jw.ways.push_back(way);
    }
    if (const auto spilled = spilled_way(job, budgeted, options, cost)) {
      const bool same = std::any_of(jw.ways.begin(), jw.ways.end(),
                                    [&](const JobWay& w) { return w.plan == spilled->plan; });
      if (same) {
        for (JobWay& w : jw.ways) w.spilled = w.spilled || w.plan == spilled->plan;
      } else {
        jw.ways.push_back(*spilled);
      }
    }
    for (JobWay& w : jw.ways) w.duration_s = static_cast<double>(job.train.steps) * w.step_s;
    std::stable_sort(jw.ways.begin(), jw.ways.end(),
                     [](const JobWay& a, const JobWay& b) { return a.duration_s < b.duration_s; });
    if (jw.ways.empty()) {
      // Not memory, when strata's executor does not train the job on this backend at all.
      if (const std::string why = runnable_violation(job.model, job.train, Plan{}, budgeted);
          !why.empty()) {
        throw InfeasiblePlan(fmt::format("job '{}' has no way on cluster {}: strata's executor "
                                         "does not train it there: {}",
                                         job.name, cluster.name, why));
      }
      throw InfeasiblePlan(fmt::format("job '{}' fits no way on {} device(s) of {} with {:.4g} "
                                       "MiB of device memory each (not spilled to host memory, "
                                       "nor on 1..{} devices)", job.name, options.devices,
                                       cluster.name, budgeted.device.memory_bytes / 1048576.0,
                                       options.devices));
    }
    out.push_back(std::move(jw));
  }
  return out;
}

double makespan_lower_bound(const std::vector<Job>& jobs, const std::vector<JobWays>& ways,
                            std::int64_t devices) {
  double longest = 0, work = 0;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    double least_duration = kInf, least_work = kInf;
    for (const JobWay& w : ways[j].ways) {
      least_duration = std::min(least_duration, w.duration_s);
      least_work = std::min(least_work, w.device_time_s());
    }
    longest = std::max(longest, least_duration);
    work += least_work;
  }
  return std::max(longest, work / static_cast<double>(devices));
}

SelectSchedule schedule_jobs(const std::vector<Job>& jobs, const std::vector<JobWays>& ways,
                             const SelectDevices& layout, SelectPolicy policy) {
  const std::int64_t devices = layout.devices;
  if (ways.size() != jobs.size()) throw std::logic_error("schedule_jobs: one JobWays per job");
  SelectSchedule s;
  switch (policy) {
    case SelectPolicy::kStrata: s = strata_schedule(jobs, ways, layout); break;
    case SelectPolicy::kLrtf: s = lrtf_schedule(jobs, ways, layout); break;
    case SelectPolicy::kSequential: s = sequential_schedule(jobs, ways, devices); break;
  }
  s.policy = policy;
  s.layout = layout;
  sort_slices(s.slices);
  s.lower_bound_s = makespan_lower_bound(jobs, ways, devices);
  return s;
}

}  // namespace strata
