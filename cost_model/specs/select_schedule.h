// The schedule of a multi-model run (strata select): which job runs which of its steps on
// which devices, predicted when; made by planner/select.h, run by executor/select, reported
// beside what was measured. Vocabulary only (the planner and the executor both use it and
// neither depends on the other).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// The D devices a schedule runs on, numbered node by node as `--gpus D` takes them from the
// cluster: device d is local device d % G of node d / G (G = gpus_per_node); the last node
// may hold fewer than G of them. The one place that maps a device to its node.
struct SelectDevices {
  std::int64_t devices = 1;
  std::int64_t gpus_per_node = 0;  // G; 0: one node holds all D

  std::int64_t per_node() const { return gpus_per_node > 0 ? gpus_per_node : devices; }
  std::int64_t node_of(std::int64_t device) const { return device / per_node(); }
  std::int64_t local_of(std::int64_t device) const { return device % per_node(); }
  std::int64_t nodes() const { return (devices + per_node() - 1) / per_node(); }
};

enum class SelectPolicy { kStrata, kLrtf, kSequential };
std::string to_string(SelectPolicy policy);
SelectPolicy select_policy_from_string(const std::string& s);  // ConfigError

// One piece of a schedule: steps [first_step, first_step + steps) of a job with its way, on
// `devices` (device indices, rank order), predicted from start_s to end_s.
struct ScheduleSlice {
  std::size_t job = 0;
  std::vector<std::int64_t> devices;
  std::int64_t first_step = 0;
  std::int64_t steps = 0;
  double start_s = 0;
  double end_s = 0;
};

struct SelectSchedule {
  SelectPolicy policy = SelectPolicy::kStrata;
  SelectDevices layout;                 // which node each slice's devices are on
  std::vector<std::size_t> way_of_job;  // index into job_ways()[job].ways
  std::vector<ScheduleSlice> slices;    // by start time, then device
  double makespan_s = 0;
  double lower_bound_s = 0;
};

}  // namespace strata
