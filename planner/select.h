// The multi-model scheduler of `strata select` (Hydra, Saturn): for every job of a workload,
// the ways it can run, priced by the cost model, then a joint choice of way, devices and
// start time per job, under one of three policies:
//   strata      the joint choice that minimises the predicted makespan. A job runs with one
//               way from start to end on a fixed set of devices (Saturn's model); ways are the
//               job's best plan on 1..D devices and a spilled single-device way. The search
//               tries every combination of ways (or, past a bound, the best way by device-time
//               and each job's next-best), each list-scheduled (earliest start where enough
//               devices are free together) in every job order for up to 7 jobs, in two
//               orders (most device-time, longest first) past that; the best makespan wins.
//               On several nodes a job runs inside one node when its way fits a node, else
//               on whole nodes, its ranks node by node: where its prediction priced it
//               (intra-node link inside a node; the groups spanning nodes on the inter-node
//               link, TP groups always inside a node).
//   lrtf        Hydra: every job runs spilled on one device; whenever a device is free it
//               takes the job with the longest remaining time that is not running and runs
//               one step of it (jobs interleave step by step across devices). A job's
//               steps stay on the node of its first step (its state is in that node's host
//               memory).
//   sequential  one job after another, each with its best way on all D devices.
// Every policy's schedule comes with a lower bound on the makespan of ANY schedule of these
// ways: max(the largest job's least duration, the least device-time of all jobs over D).
// Deterministic: ties break by job index, then device index.
// Deliberately not here: running the schedule (executor/select), files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/profile.h"
#include "cost_model/specs/select_schedule.h"
#include "cost_model/specs/step_report.h"
#include "cost_model/specs/workload.h"

namespace strata {

// One way to run a job: a plan on `devices` devices, priced.
struct JobWay {
  Plan plan;
  std::int64_t devices = 1;
  bool spilled = false;      // the model state lives on the host between steps (Hydra)
  double step_s = 0;         // predicted, with every device of the node busy
  double duration_s = 0;     // steps x step_s
  Prediction prediction;
  double device_time_s() const { return static_cast<double>(devices) * duration_s; }
};

struct JobWays {
  std::vector<JobWay> ways;  // fastest first; empty when the job fits no way
};

struct SelectOptions {
  std::int64_t devices = 1;             // D
  double device_budget_bytes = 0;       // > 0: each device's memory instead of the cluster's
  const Profile* profile = nullptr;
  std::int64_t max_micro_batch = 16;
};

// The ways of every job. Throws InfeasiblePlan naming the first job that fits no way.
std::vector<JobWays> job_ways(const std::vector<Job>& jobs, const ClusterSpec& cluster,
                              const SelectOptions& options);

// Throws InfeasiblePlan when a policy has no way for a job (lrtf: no spilled way; sequential:
// no way on all D devices).
SelectSchedule schedule_jobs(const std::vector<Job>& jobs, const std::vector<JobWays>& ways,
                             const SelectDevices& layout, SelectPolicy policy);

// The bound above, for the ways the policy may use (every way of every job).
double makespan_lower_bound(const std::vector<Job>& jobs, const std::vector<JobWays>& ways,
                            std::int64_t devices);

}  // namespace strata
