// Why a step takes what it takes: the longest path through a priced Program's timing graph
// (program_graph.h), i.e. the chain of ops on which ranks that sets the step time, with the
// durations the simulator priced. Every op on it starts when the op before it on the path
// ends, so its durations sum to the step time (the simulator's, to rounding: tested); an op
// off the path has slack, the time it could take longer without moving the step's end.
//
// Shares by kind: each op's priced split (StepTimeParts) goes to compute (forward,
// backward, recompute), TP comm, PP comm, DP comm (and the tail's world collectives),
// offload copies, optimizer; waiting is a gap between one op's end and the next op's start
// on the path, zero for a predicted path and where a measured one waited outside the
// Program (a slow peer, the launch).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "cost_model/program/program.h"
#include "cost_model/checks/graph_vertex.h"
#include "cost_model/program/program_simulator.h"

namespace strata {

struct PathOp {
  GraphVertex vertex;       // rank, op, body op, priced duration (its `parts`: null)
  StepTimeParts parts;      // its priced split
  std::string what;         // describe_vertex
  double start_s = 0;
  double duration_s = 0;
  Dependency waited_for = Dependency::kOrder;  // the edge from the op before it on the path
  std::string waited_on;    // that op (empty for the first)
};

struct PathShares {
  double compute_s = 0, tp_comm_s = 0, pp_comm_s = 0, dp_comm_s = 0, offload_s = 0,
         optimizer_s = 0, waiting_s = 0, other_s = 0;
  double sum() const {
    return compute_s + tp_comm_s + pp_comm_s + dp_comm_s + offload_s + optimizer_s + waiting_s +
           other_s;
  }
};

struct OffPathOp {
  std::string what;
  double duration_s = 0;
  double slack_s = 0;  // how much later it could end without delaying the step
};

struct CriticalPath {
  double step_s = 0;             // the path's end: the step time
  std::vector<PathOp> ops;       // in time order; zero-length ops (receives, pass starts) kept
  PathShares shares;
  std::vector<OffPathOp> largest_off_path;  // the longest ops not on the path, longest first
};

// The critical path of `program` priced by `priced` ([pp_rank], in `mode`), with the
// `off_path` longest ops off it. Throws std::logic_error when the timing graph has a cycle
// (check_deadlock_free first).
CriticalPath critical_path(const Program& program, const std::vector<PricedRank>& priced,
                           SimulationMode mode, std::size_t off_path = 8);

}  // namespace strata
