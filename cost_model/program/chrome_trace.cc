// Chrome trace-event JSON: building, writing, reading back and merging traces, and turning
// a replayed Program into events. Knows nothing of how the executor measures its events.
#include "cost_model/program/chrome_trace.h"

#include <algorithm>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/program/program_simulator.h"
#include "cost_model/specs/units.h"

namespace strata {
namespace {

// Sort order of "X" events: by pid, tid, start, then name, then longer first (a parent
// before the events it contains), then category; equal keys keep their input order.
bool event_before(const TraceEvent& a, const TraceEvent& b) {
  return std::tie(a.pid, a.tid, a.start_s, a.name, b.duration_s, a.category) <
         std::tie(b.pid, b.tid, b.start_s, b.name, a.duration_s, b.category);
}

Json metadata_event(const std::string& what, std::int64_t pid, std::int64_t tid,
                    const std::string& name) {
  return Json{{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
              {"args", Json{{"name", name}}}};
}

}  // namespace

Json chrome_trace_json(const std::vector<TraceEvent>& events,
                       const std::map<std::int64_t, std::string>& process_names,
                       const std::map<ThreadKey, std::string>& thread_names) {
  Json list = Json::array();
  for (const auto& [pid, name] : process_names) {
    list.push_back(metadata_event("process_name", pid, 0, name));
  }
  for (const auto& [key, name] : thread_names) {
    list.push_back(metadata_event("thread_name", key.first, key.second, name));
  }
  std::vector<TraceEvent> sorted = events;
  std::stable_sort(sorted.begin(), sorted.end(), event_before);
  for (const TraceEvent& e : sorted) {
    list.push_back(Json{{"name", e.name},
                        {"cat", e.category},
                        {"ph", "X"},
                        {"ts", e.start_s / units::kMicrosecond},
                        {"dur", e.duration_s / units::kMicrosecond},
                        {"pid", e.pid},
                        {"tid", e.tid},
                        {"args", e.args.is_null() ? Json::object() : e.args}});
  }
  return Json{{"traceEvents", std::move(list)}, {"displayTimeUnit", "ms"}};
}

Json chrome_trace_json(const ChromeTrace& trace) {
  return chrome_trace_json(trace.events, trace.process_names, trace.thread_names);
}

void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events,
                        const std::map<std::int64_t, std::string>& process_names,
                        const std::map<ThreadKey, std::string>& thread_names) {
  // Compact: a trace of a large pipeline has hundreds of thousands of events.
  write_json_file(path, chrome_trace_json(events, process_names, thread_names), -1);
}

void write_chrome_trace(const std::string& path, const ChromeTrace& trace) {
  write_chrome_trace(path, trace.events, trace.process_names, trace.thread_names);
}

ChromeTrace chrome_trace_from_json(const Json& json, const std::string& source) {
  if (!json.is_object() || !json.contains("traceEvents") || !json["traceEvents"].is_array()) {
    throw ConfigError(config_message(source, "traceEvents", json.is_object() ? "missing" : json.dump(),
                                     "an array of trace events"));
  }
  ChromeTrace trace;
  const Json& list = json["traceEvents"];
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string path = fmt::format("traceEvents[{}]", i);
    JsonObjectReader reader(list[i], source, path);
    const std::string ph = reader.get_string("ph");
    if (ph == "M") {
      const std::string what = reader.get_string("name");
      const std::int64_t pid = reader.get_int("pid");
      const std::int64_t tid = reader.get_int_or("tid", 0);
      const std::string name = reader.get_object("args").get_string("name");
      if (what == "process_name") trace.process_names[pid] = name;
      if (what == "thread_name") trace.thread_names[{pid, tid}] = name;
      continue;
    }
    if (ph != "X") continue;  // other phases are not ours; skip them
    TraceEvent e;
    e.name = reader.get_string("name");
    e.category = reader.get_string_or("cat", "");
    e.pid = reader.get_int("pid");
    e.tid = reader.get_int("tid");
    e.start_s = reader.get_number("ts") * units::kMicrosecond;
    e.duration_s = reader.get_number("dur") * units::kMicrosecond;
    reader.require_non_negative("dur", e.duration_s);
    e.args = reader.has("args") ? list[i]["args"] : Json::object();
    trace.events.push_back(std::move(e));
  }
  return trace;
}

ChromeTrace read_chrome_trace(const std::string& path) {
  return chrome_trace_from_json(read_json_file(path), path);
}

std::string op_category(const std::string& op_name) {
  if (op_name == "forward" || op_name == "backward") return "compute";
  if (op_name == "send_forward" || op_name == "recv_forward" || op_name == "send_backward" ||
      op_name == "recv_backward") {
    return "p2p";
  }
  return "tail";
}

std::vector<TraceEvent> program_trace_events(const Program& program,
                                             const ProgramTimeline& timeline, std::int64_t pid) {
  std::vector<TraceEvent> events;
  for (std::size_t r = 0; r < timeline.ranks.size(); ++r) {
    const RankProgram& rank = program.ranks.at(r);
    const auto pp_rank = static_cast<std::int64_t>(r);
    const auto unit_name = [&](std::int32_t u) {
      return rank.units.at(static_cast<std::size_t>(u)).name;
    };
    for (const TimedOp& t : timeline.ranks[r]) {
      const ProgramOp& step = rank.ops.at(static_cast<std::size_t>(t.op));
      const bool in_body = t.body_op >= 0;
      const ProgramOp& op =
          in_body ? rank.bodies.at(static_cast<std::size_t>(step.body)).ops.at(static_cast<std::size_t>(t.body_op))
                  : step;
      TraceEvent e;
      e.name = to_string(op.kind);
      e.pid = pid;
      e.tid = stream_tid(pp_rank, op.stream);
      e.start_s = t.start_s;
      e.duration_s = t.end_s - t.start_s;
      if (t.op >= rank.tail_begin) {
        e.category = "tail";
        e.args = op.unit >= 0 ? Json{{"unit", unit_name(op.unit)}} : Json::object();
      } else if (!in_body) {
        e.category = op.is_pass() ? "compute" : "p2p";
        e.args = Json{{"micro_batch", step.micro_batch}, {"chunk", step.chunk}};
      } else {
        e.category = op.kind == ProgramOpKind::kCompute ? "compute" : "state";
        e.args = Json{{"micro_batch", step.micro_batch}, {"chunk", step.chunk}, {"unit", unit_name(op.unit)}};
        if (op.kind == ProgramOpKind::kCompute) {
          static constexpr const char* kParts[] = {"none", "embedding", "layer", "head"};
          e.args["part"] = kParts[static_cast<int>(op.part)];
        }
      }
      // The op's place in the Program, as the engine's trace names it (path_trace.h).
      e.args["op"] = t.op;
      if (in_body) e.args["body_op"] = t.body_op;
      events.push_back(std::move(e));
    }
  }
  return events;
}

ChromeTrace program_trace(const Program& program, const ProgramTimeline& timeline,
                          std::int64_t pid, const std::string& process_name) {
  ChromeTrace trace;
  trace.events = program_trace_events(program, timeline, pid);
  trace.process_names[pid] = process_name;
  for (const TraceEvent& e : trace.events) {
    const std::int64_t pp_rank = e.tid / kStreamCount;
    const auto stream = static_cast<Stream>(e.tid % kStreamCount);
    trace.thread_names[{pid, e.tid}] = fmt::format("pp_rank {} {}", pp_rank, to_string(stream));
  }
  return trace;
}

ChromeTrace merge_chrome_traces(const std::vector<std::pair<std::string, ChromeTrace>>& labelled) {
  ChromeTrace merged;
  for (std::size_t i = 0; i < labelled.size(); ++i) {
    const auto pid = static_cast<std::int64_t>(i);
    const auto& [label, trace] = labelled[i];
    merged.process_names[pid] = label;
    // Every (pid, tid) the trace mentions, named or not, in order.
    std::set<ThreadKey> threads;
    std::set<std::int64_t> pids;
    for (const TraceEvent& e : trace.events) threads.insert({e.pid, e.tid});
    for (const auto& [key, name] : trace.thread_names) threads.insert(key);
    for (const auto& key : threads) pids.insert(key.first);
    std::map<ThreadKey, std::int64_t> new_tid;
    for (const ThreadKey& key : threads) {
      const auto tid = static_cast<std::int64_t>(new_tid.size());
      new_tid[key] = tid;
      const auto thread_it = trace.thread_names.find(key);
      const std::string thread_name = thread_it != trace.thread_names.end()
                                          ? thread_it->second
                                          : fmt::format("tid {}", key.second);
      std::string name = thread_name;
      if (pids.size() > 1) {
        const auto process_it = trace.process_names.find(key.first);
        const std::string process_name = process_it != trace.process_names.end()
                                             ? process_it->second
                                             : fmt::format("pid {}", key.first);
        name = fmt::format("{} / {}", process_name, thread_name);
      }
      merged.thread_names[{pid, tid}] = name;
    }
    for (const TraceEvent& e : trace.events) {
      TraceEvent copy = e;
      copy.pid = pid;
      copy.tid = new_tid.at({e.pid, e.tid});
      merged.events.push_back(std::move(copy));
    }
  }
  return merged;
}

}  // namespace strata
