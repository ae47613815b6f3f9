// Measured op times from a trace and the path marked on one (see path_trace.h).
#include "cost_model/checks/path_trace.h"

#include <map>
#include <tuple>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata {
namespace {

using OpKey = std::tuple<std::int32_t, std::int32_t, std::int32_t>;  // rank, op, body_op

bool has_op(const TraceEvent& e) { return e.args.is_object() && e.args.contains("op"); }

OpKey key_of(const TraceEvent& e) {
  return {static_cast<std::int32_t>(e.tid / kStreamCount), e.args.at("op").get<std::int32_t>(),
          e.args.value("body_op", -1)};
}

}  // namespace

std::vector<MeasuredOp> measured_ops(const ChromeTrace& trace, const std::string& source) {
  std::map<OpKey, MeasuredOp> latest;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.category == "kernel") continue;  // a layer op inside an op (strata run --kernel-trace)
    if (!has_op(e) || !e.args.at("op").is_number_integer()) {
      throw ConfigError(fmt::format(
          "{}: event {} ({} on process {}) has no integer args.op: the trace names no Program "
          "op (written by an older strata? run again)", source, i, e.name, e.pid));
    }
    const OpKey key = key_of(e);
    const bool pass_start = std::get<2>(key) < 0 && (e.name == "forward" || e.name == "backward");
    MeasuredOp m{std::get<0>(key), std::get<1>(key), std::get<2>(key), e.start_s,
                 pass_start ? 0.0 : e.duration_s, e.pid};
    const auto [it, inserted] = latest.emplace(key, m);
    const MeasuredOp& held = it->second;
    if (!inserted && m.start_s + m.duration_s > held.start_s + held.duration_s) it->second = m;
  }
  std::vector<MeasuredOp> out;
  out.reserve(latest.size());
  for (const auto& [key, m] : latest) out.push_back(m);
  return out;
}

std::size_t mark_critical_path(ChromeTrace& trace, const CriticalPath& path,
                               const std::vector<std::int64_t>& process) {
  std::map<OpKey, std::size_t> index;  // path op by its key
  for (std::size_t k = 0; k < path.ops.size(); ++k) {
    const GraphVertex& v = path.ops[k].vertex;
    index[{v.rank, v.op, v.body_op}] = k;
  }
  std::size_t marked = 0;
  for (TraceEvent& e : trace.events) {
    if (!has_op(e)) continue;
    const auto it = index.find(key_of(e));
    if (it == index.end()) continue;
    const PathOp& op = path.ops[it->second];
    if (!process.empty() && process[it->second] != e.pid) continue;
    e.args["critical_path"] = true;
    e.args["critical_path_index"] = it->second;
    e.args["critical_path_s"] = op.duration_s;
    ++marked;
  }
  return marked;
}

}  // namespace strata
