// See critical_path_print.h.
#include "tools/strata/critical_path_print.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tools/strata/inputs.h"

namespace strata::cli {
namespace {

// The op's own name without "rank R op I " (the run's rank is printed in its own column).
std::string op_name(const PathOp& op) {
  const std::string prefix = fmt::format("rank {} op {} ", op.vertex.rank, op.vertex.op);
  return op.what.rfind(prefix, 0) == 0 ? op.what.substr(prefix.size()) : op.what;
}

struct Run {
  std::size_t first = 0, last = 0;  // indices into path.ops
};

std::vector<Run> runs_of(const CriticalPath& path) {
  std::vector<Run> runs;
  for (std::size_t i = 0; i < path.ops.size(); ++i) {
    if (runs.empty() || path.ops[i].vertex.rank != path.ops[runs.back().first].vertex.rank) {
      runs.push_back({i, i});
    } else {
      runs.back().last = i;
    }
  }
  return runs;
}

// "forward x12, backward x11, send_forward x12": the step ops a run passes through.
std::string step_ops_of(const CriticalPath& path, const Run& run) {
  std::map<std::string, int> count;
  std::set<std::int32_t> seen;
  for (std::size_t i = run.first; i <= run.last; ++i) {
    const PathOp& op = path.ops[i];
    if (!seen.insert(op.vertex.op).second) continue;
    std::string kind = op_name(op);
    kind = kind.substr(0, kind.find(' '));
    ++count[kind];
  }
  std::string s;
  for (const auto& [kind, n] : count) s += fmt::format("{}{} x{}", s.empty() ? "" : ", ", kind, n);
  return s;
}

}  // namespace

void print_critical_path(std::ostream& out, const CriticalPath& path) {
  const std::vector<Run> runs = runs_of(path);
  std::set<std::int32_t> ranks;
  for (const PathOp& op : path.ops) ranks.insert(op.vertex.rank);
  double durations = 0;
  for (const PathOp& op : path.ops) durations += op.duration_s;
  out << fmt::format("critical path: {:.6f} s, {} ops in {} runs over {} pipeline ranks; its "
                     "durations sum to {:.6f} s\n",
                     path.step_s, path.ops.size(), runs.size(), ranks.size(), durations);
  if (!path.ops.empty()) {
    // The rank it ends on is the critical rank of predict and simulate (its step ends last);
    // the rank it runs longest through is where the time goes.
    std::map<std::int32_t, double> on_rank;
    for (const PathOp& op : path.ops) on_rank[op.vertex.rank] += op.duration_s;
    const auto longest = std::max_element(on_rank.begin(), on_rank.end(),
                                          [](const auto& a, const auto& b) { return a.second < b.second; });
    out << fmt::format("  it ends on pp_rank {}, the critical rank (its step ends last), and runs "
                       "longest through pp_rank {} ({:.6f} s, {})\n",
                       path.ops.back().vertex.rank, longest->first, longest->second,
                       percent(longest->second / (path.step_s > 0 ? path.step_s : 1.0)));
  }
  out << fmt::format("  {:>4} {:>10} {:>10}  {}\n", "rank", "start_s", "length_s",
                     "first op .. last op of the run");
  for (const Run& run : runs) {
    const PathOp& first = path.ops[run.first];
    const PathOp& last = path.ops[run.last];
    const std::string ops =
        run.first == run.last ? op_name(first) : op_name(first) + " .. " + op_name(last);
    const std::string after =
        first.waited_on.empty() ? "the step's start"
                                : fmt::format("{} ({})", first.waited_on, to_string(first.waited_for));
    out << fmt::format("  {:>4} {:>10.6f} {:>10.6f}  {}\n", first.vertex.rank, first.start_s,
                       last.start_s + last.duration_s - first.start_s, ops);
    out << fmt::format("  {:>27}  started after {}; through {}\n", "", after, step_ops_of(path, run));
  }
  const PathShares& s = path.shares;
  const double step = path.step_s > 0 ? path.step_s : 1.0;
  const std::pair<const char*, double> shares[] = {
      {"compute", s.compute_s},     {"TP comm", s.tp_comm_s}, {"PP comm", s.pp_comm_s},
      {"DP comm", s.dp_comm_s},     {"offload copies", s.offload_s},
      {"optimizer", s.optimizer_s}, {"waiting", s.waiting_s}, {"other", s.other_s}};
  out << "path by kind:";
  const char* separator = " ";
  for (const auto& [name, seconds] : shares) {
    out << fmt::format("{}{} {:.6f} s ({})", separator, name, seconds, percent(seconds / step));
    separator = ", ";
  }
  out << "\n";
  if (!path.largest_off_path.empty()) {
    out << "longest ops off the path (slack: how much longer each could take without delaying "
           "the step):\n";
    for (const OffPathOp& off : path.largest_off_path) {
      out << fmt::format("  {:<70} {:>10.6f} s  slack {:>10.6f} s\n", off.what, off.duration_s,
                         off.slack_s);
    }
  }
}

}  // namespace strata::cli
