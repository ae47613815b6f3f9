// The schedule of a multi-model run (strata select): which job runs which of its steps on
// which devices, predicted when; made by planner/select.h, run by executor/select, reported
// beside what was measured. Vocabulary only (the planner and the executor both use it and
// neither depends on the other).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

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
  std::vector<std::size_t> way_of_job;  // index into job_ways()[job].ways
  std::vector<ScheduleSlice> slices;    // by start time, then device
  double makespan_s = 0;
  double lower_bound_s = 0;
};

}  // namespace strata
