// Hand-made jobs and ways for the select scheduler's tests (select_test.cc,
// select_nodes_test.cc): a job is a name and a step count, a way its devices and duration.
#pragma once

#include <cstdint>
#include <string>

#include "planner/select.h"

namespace strata::testing_support {

inline Job job(const std::string& name, std::int64_t steps) {
  Job j;
  j.name = name;
  j.train.steps = steps;
  return j;
}

inline JobWay way(std::int64_t devices, double duration_s, std::int64_t steps,
                  bool spilled = false) {
  JobWay w;
  w.devices = devices;
  w.duration_s = duration_s;
  w.step_s = duration_s / static_cast<double>(steps);
  w.spilled = spilled;
  return w;
}

}  // namespace strata::testing_support
