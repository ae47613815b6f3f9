// The critical path and Chrome traces (chrome_trace.h): a run's measured op times read from
// its trace, for the measured critical path (critical_path.h), and a path marked on a trace so
// that Perfetto shows the chain. Both name an op the way every strata trace does: its
// pipeline rank (the thread, tid / kStreamCount), its "op" (the step op's index) and, for a
// body op, its "body_op" (the index in its pass's body): the engine's events and the
// simulator's (chrome_trace.h: program_trace_events) carry both in their args.
#pragma once

#include <string>
#include <vector>

#include "cost_model/program/chrome_trace.h"
#include "cost_model/checks/critical_path.h"
#include "cost_model/checks/measured_path.h"

namespace strata {

// Every op of a run's trace (`strata run`'s trace.json: one step, every rank) once: of the
// replicas (DP and TP peers) of one pipeline rank, the event that ends last (the pipeline
// rank's op is done when all of its replicas are). A pass is its start (length 0: its body
// ops carry its time). ConfigError naming `source` and the event when an event has no "op".
// Kernel spans (category "kernel", `strata run --kernel-trace`) lie inside ops: skipped.
std::vector<MeasuredOp> measured_ops(const ChromeTrace& trace, const std::string& source);

// Marks every event of `trace` that is an op of `path` (with `process`, a measured path's,
// only the event of the process each op was timed on) with args "critical_path": true, "critical_path_index" (its place on the
// path, from 0) and "critical_path_s" (its length on the path: PathOp::duration_s).
// Returns how many events it marked.
std::size_t mark_critical_path(ChromeTrace& trace, const CriticalPath& path,
                               const std::vector<std::int64_t>& process = {});

}  // namespace strata
