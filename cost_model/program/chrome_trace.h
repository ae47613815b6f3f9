// Chrome trace-event JSON (the format chrome://tracing and Perfetto open), written by both
// the simulator and the executor with the same op names (program.h's to_string), so
// predicted and measured timelines open side by side. Complete events only ("ph":"X", times
// in microseconds) plus "process_name"/"thread_name" metadata events ("ph":"M").
//
// Deliberately not here: flow arrows, counters, async events, streaming writes.
//
// Thread convention for pipeline timelines (simulator and executor alike): pid is the
// process (a simulation, or a global rank), and each of a pipeline rank's streams is a
// thread, tid = kStreamCount * pp_rank + stream (compute 0, comm 1, copy 2, p2p 3, host 4).
// Events on one thread never overlap, except that a pass contains the compute-stream ops of
// its body (Perfetto nests them under it).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>  // TraceEvent holds its args by value

#include "cost_model/specs/json_reader.h"
#include "cost_model/program/program.h"

namespace strata {

struct ProgramTimeline;

struct TraceEvent {
  std::string name;       // "forward", "send_forward", "gather", ..., "optimizer_step"
  std::string category;   // "compute", "p2p", "state", "tail" (the "cat" field)
  std::int64_t pid = 0;
  std::int64_t tid = 0;
  double start_s = 0;     // seconds since the trace's origin
  double duration_s = 0;
  Json args = Json::object();  // pipeline ops: {"micro_batch": m, "chunk": c}
  bool operator==(const TraceEvent&) const = default;
};

using ThreadKey = std::pair<std::int64_t, std::int64_t>;  // (pid, tid)

// A whole trace: events plus the names shown for processes and threads.
struct ChromeTrace {
  std::vector<TraceEvent> events;
  std::map<std::int64_t, std::string> process_names;
  std::map<ThreadKey, std::string> thread_names;
  bool operator==(const ChromeTrace&) const = default;
};

// {"traceEvents": [metadata events (by pid, then tid), then "X" events sorted by
// (pid, tid, ts, name, longer first)], "displayTimeUnit": "ms"}. ts and dur are in
// microseconds. Deterministic: the same input gives the same bytes.
Json chrome_trace_json(const std::vector<TraceEvent>& events,
                       const std::map<std::int64_t, std::string>& process_names,
                       const std::map<ThreadKey, std::string>& thread_names);
Json chrome_trace_json(const ChromeTrace& trace);

// Writes atomically via write_json_file (SystemError on I/O failure).
void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events,
                        const std::map<std::int64_t, std::string>& process_names,
                        const std::map<ThreadKey, std::string>& thread_names);
void write_chrome_trace(const std::string& path, const ChromeTrace& trace);

// Parses a trace written by chrome_trace_json (only "X" and "M" process_name/thread_name
// events; others are skipped). ConfigError naming `source` on a malformed trace.
ChromeTrace chrome_trace_from_json(const Json& json, const std::string& source);
ChromeTrace read_chrome_trace(const std::string& path);

// Trace thread ids of a pipeline rank's streams (the convention above).
inline std::int64_t stream_tid(std::int64_t pp_rank, Stream stream) {
  return kStreamCount * pp_rank + static_cast<std::int64_t>(stream);
}
inline std::int64_t compute_tid(std::int64_t pp_rank) { return stream_tid(pp_rank, Stream::kCompute); }
inline std::int64_t p2p_tid(std::int64_t pp_rank) { return stream_tid(pp_rank, Stream::kP2p); }

// The category of a pipeline op name: "compute" for forward/backward, "p2p" for sends and
// receives, "tail" for anything else.
std::string op_category(const std::string& op_name);

// One event per op of a replayed Program (program_simulator.h), on its stream's thread:
//   passes and messages   "compute" / "p2p", args {micro_batch, chunk};
//   body ops              "compute" for compute steps (args also {part, unit}), "state" for
//                         state moves (args also {unit}): micro_batch and chunk of their pass;
//   tail ops              "tail", args {unit} when the op has one.
// Every op is written, zero-length ones (releases) included.
std::vector<TraceEvent> program_trace_events(const Program& program,
                                             const ProgramTimeline& timeline, std::int64_t pid);
// The same with process name `process_name` and thread names "pp_rank r <stream>" for every
// stream that has events.
ChromeTrace program_trace(const Program& program, const ProgramTimeline& timeline,
                          std::int64_t pid, const std::string& process_name);

// Merges traces into one, trace i becoming process i (pid = i) named by its label; every
// (pid, tid) of trace i becomes one thread of that process, numbered in (pid, tid) order and
// named "<old process name> / <old thread name>" when the trace had several processes, else
// by its old thread name. Used by `strata compare --trace` (predicted vs measured).
ChromeTrace merge_chrome_traces(const std::vector<std::pair<std::string, ChromeTrace>>& labelled);

}  // namespace strata
