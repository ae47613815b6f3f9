// See path_summary.h.
#include "tools/strata/path_summary.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "tools/strata/inputs.h"

namespace strata::cli {
namespace {

// The op's kind from its description: "rank R op I kind ..." or, for a body op,
// "rank R op I pass ... / kind unit".
std::string kind_of(const PathOp& op) {
  const std::size_t body = op.what.find(" / ");
  std::string rest;
  if (body != std::string::npos) {
    rest = op.what.substr(body + 3);
  } else {
    const std::string prefix = fmt::format("rank {} op {} ", op.vertex.rank, op.vertex.op);
    rest = op.what.rfind(prefix, 0) == 0 ? op.what.substr(prefix.size()) : op.what;
  }
  return rest.substr(0, rest.find(' '));
}

double share(double seconds, double step) { return step > 0 ? seconds / step : 0.0; }

}  // namespace

PathSummary summarize_path(const CriticalPath& path, std::size_t top) {
  PathSummary s;
  s.step_s = path.step_s;
  s.waiting_s = path.shares.waiting_s;
  std::map<std::string, KindRow> rows;
  for (const PathOp& op : path.ops) {
    s.durations_s += op.duration_s;
    KindRow& row = rows[kind_of(op)];
    row.kind = kind_of(op);
    ++row.count;
    row.seconds += op.duration_s;
  }
  for (const auto& [kind, row] : rows) s.by_kind.push_back(row);
  std::stable_sort(s.by_kind.begin(), s.by_kind.end(),
                   [](const KindRow& a, const KindRow& b) { return a.seconds > b.seconds; });
  s.by_kind.push_back({"waiting", 0, s.waiting_s});
  s.top_ops = path.ops;
  std::stable_sort(s.top_ops.begin(), s.top_ops.end(),
                   [](const PathOp& a, const PathOp& b) { return a.duration_s > b.duration_s; });
  s.top_ops.resize(std::min(top, s.top_ops.size()));
  return s;
}

void print_paths_side_by_side(std::ostream& out, const PathSummary& predicted,
                              const PathSummary& measured) {
  out << fmt::format("critical path by kind of op (share: of that path's step)\n");
  out << fmt::format("  {:<20} {:>6} {:>11} {:>7}   {:>6} {:>11} {:>7}\n", "", "predicted", "", "",
                     "measured", "", "");
  out << fmt::format("  {:<20} {:>6} {:>11} {:>7}   {:>6} {:>11} {:>7}\n", "kind", "ops", "seconds",
                     "share", "ops", "seconds", "share");
  // Every kind either path has, in the measured path's order, then the predicted's rest.
  std::vector<std::string> kinds;
  std::set<std::string> seen;
  for (const PathSummary* s : {&measured, &predicted}) {
    for (const KindRow& row : s->by_kind) {
      if (row.kind != "waiting" && seen.insert(row.kind).second) kinds.push_back(row.kind);
    }
  }
  kinds.push_back("waiting");
  const auto find = [](const PathSummary& s, const std::string& kind) {
    for (const KindRow& row : s.by_kind) {
      if (row.kind == kind) return row;
    }
    return KindRow{kind, 0, 0};
  };
  for (const std::string& kind : kinds) {
    const KindRow p = find(predicted, kind), m = find(measured, kind);
    out << fmt::format("  {:<20} {:>6} {:>11.6f} {:>7}   {:>6} {:>11.6f} {:>7}\n", kind, p.count,
                       p.seconds, percent(share(p.seconds, predicted.step_s)), m.count, m.seconds,
                       percent(share(m.seconds, measured.step_s)));
  }
  out << fmt::format("  {:<20} {:>6} {:>11.6f} {:>7}   {:>6} {:>11.6f} {:>7}\n", "path (sum)", "",
                     predicted.durations_s + predicted.waiting_s, "", "",
                     measured.durations_s + measured.waiting_s, "");
  for (const auto& [label, s] : {std::pair{"predicted", &predicted}, std::pair{"measured", &measured}}) {
    out << fmt::format("longest ops on the {} path:\n", label);
    for (const PathOp& op : s->top_ops) {
      out << fmt::format("  {:<70} {:>11.6f} s at {:.6f} s\n", op.what, op.duration_s, op.start_s);
    }
  }
}

Json path_summary_json(const PathSummary& s, std::size_t ops) {
  Json by_kind = Json::array();
  for (const KindRow& row : s.by_kind) {
    by_kind.push_back({{"kind", row.kind},
                       {"count", row.count},
                       {"seconds", row.seconds},
                       {"share", share(row.seconds, s.step_s)}});
  }
  Json top = Json::array();
  for (const PathOp& op : s.top_ops) {
    top.push_back({{"what", op.what}, {"start_s", op.start_s}, {"duration_s", op.duration_s}});
  }
  return {{"step_s", s.step_s},          {"durations_s", s.durations_s},
          {"waiting_s", s.waiting_s},    {"sum_s", s.durations_s + s.waiting_s},
          {"ops", ops},                  {"by_kind", std::move(by_kind)},
          {"top_ops", std::move(top)}};
}

}  // namespace strata::cli
