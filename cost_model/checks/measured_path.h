// The measured critical path: the predicted path's timing graph (program_graph.h, the same
// edges and each op's priced split) weighted with the start and length a run measured
// (path_trace.h reads them from the run's trace), through the same longest-path walk as the
// predicted path (critical_path.cc: one function for both).
//
// Each op's predecessor on the path is the one of its graph predecessors that ended last
// (what it really waited for), and the op is on the path from that end (or from its own
// start, when it started later: the gap is waiting) to its own end. The path's lengths and
// waits therefore tile the time from the step's origin to its last op's end: they sum to the
// measured step (less what follows the last op: the step's loss sum) however the ops
// overlapped, and a blocking receive counts from its send's end, not from when it was posted.
// Shares: an op's length on the path split in its priced split's proportions (a message
// priced at nothing: PP comm; another op priced at nothing: other).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/checks/critical_path.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/profile.h"
#include "cost_model/specs/train_spec.h"

namespace strata {

// One op's measured times: pipeline rank, step op, body op (-1: the step op itself), its
// start from the step's origin, its length, and the trace process it was timed on (of the
// replicas of one pipeline rank, the one that ended it last).
struct MeasuredOp {
  std::int32_t rank = -1, op = -1, body_op = -1;
  double start_s = 0, duration_s = 0;
  std::int64_t process = 0;
};

struct MeasuredPath {
  CriticalPath path;                  // PathOp start_s / duration_s: its place on the path
  std::vector<std::int64_t> process;  // [i]: the trace process path.ops[i] was timed on
};

// `measured`: one entry per op of the Program (a pass: its start, length 0; its body ops
// carry its time). ConfigError naming the op when an op has no measurement or two, or one
// is not the Program's.
MeasuredPath measured_critical_path(const Program& program, const std::vector<PricedRank>& priced,
                                    SimulationMode mode, const std::vector<MeasuredOp>& measured,
                                    std::size_t off_path = 8);

// The plan's measured path, its Program priced as step_critical_path prices it
// (cost_model.h). Throws as step_critical_path and measured_critical_path do.
MeasuredPath step_measured_critical_path(const ModelSpec& model, const ClusterSpec& cluster,
                                         const TrainSpec& train, const Plan& plan,
                                         const Profile* profile,
                                         const std::vector<MeasuredOp>& measured,
                                         std::size_t off_path = 8);

}  // namespace strata
