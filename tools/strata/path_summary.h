// A critical path summed by op kind, for `strata compare --critical-path`: the predicted and
// the measured path side by side (per kind of op: how many on the path, their summed length
// on it, their share of the path's step; the waits; the longest ops), as text and as JSON.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cost_model/checks/critical_path.h"
#include "cost_model/specs/json_reader.h"

namespace strata::cli {

struct KindRow {
  std::string kind;  // program.h's op name ("compute", "recv_forward", ...) or "waiting"
  int count = 0;
  double seconds = 0;
};

struct PathSummary {
  double step_s = 0;       // the path's end
  double durations_s = 0;  // its ops' lengths on the path
  double waiting_s = 0;    // its gaps: durations_s + waiting_s = step_s (to rounding)
  std::vector<KindRow> by_kind;  // longest first, "waiting" last
  std::vector<PathOp> top_ops;   // the longest ops on the path, longest first
};

PathSummary summarize_path(const CriticalPath& path, std::size_t top = 5);

// Two columns (predicted | measured), a row per kind either path has.
void print_paths_side_by_side(std::ostream& out, const PathSummary& predicted,
                              const PathSummary& measured);

// {"step_s", "durations_s", "waiting_s", "sum_s", "ops", "by_kind": [{"kind", "count",
// "seconds", "share"}], "top_ops": [{"what", "start_s", "duration_s"}]}.
Json path_summary_json(const PathSummary& summary, std::size_t ops);

}  // namespace strata::cli
