// The longest path of a timing graph (see critical_path.h): a topological order from
// Boost.Graph, then earliest ends forward (each vertex remembers the in-edge that set its
// start) and latest ends backward (the slack).
#include "cost_model/checks/critical_path.h"
#include "cost_model/checks/measured_path.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>

#include <boost/graph/topological_sort.hpp>
#include <boost/range/iterator_range.hpp>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "cost_model/checks/program_graph.h"

namespace strata {
namespace {

using Vertex = GraphVertexId;
constexpr Vertex kNone = static_cast<Vertex>(-1);

StepTimeParts scaled(StepTimeParts t, double factor) {
  for (double* x : {&t.forward_s, &t.backward_s, &t.recompute_s, &t.tp_comm_s, &t.pp_comm_s,
                    &t.dp_comm_s, &t.offload_s, &t.optimizer_s, &t.bubble_s, &t.other_s}) {
    *x *= factor;
  }
  return t;
}

void add_shares(PathShares& s, const StepTimeParts& t) {
  s.compute_s += t.forward_s + t.backward_s + t.recompute_s;
  s.tp_comm_s += t.tp_comm_s;
  s.pp_comm_s += t.pp_comm_s;
  s.dp_comm_s += t.dp_comm_s;
  s.offload_s += t.offload_s;
  s.optimizer_s += t.optimizer_s;
  s.other_s += t.bubble_s + t.other_s;
}

// The measured times of the timing graph's op vertices ([vertex]; process -1: not an op).
struct VertexTimes {
  std::vector<double> start, duration;
  std::vector<std::int64_t> process;
};

// The longest path of `tg` (see critical_path.h): predicted when `measured` is null (each
// vertex starts when its last predecessor ends), else each op vertex at its measured times.
// `process`, when measured: each path op's trace process.
CriticalPath path_through(const Program& program, const ProgramGraph& tg,
                          const VertexTimes* measured, std::size_t off_path,
                          std::vector<std::int64_t>* process = nullptr) {
  const DependencyGraph& g = tg.graph;
  const std::size_t n = boost::num_vertices(g);
  std::vector<Vertex> reverse_order;
  reverse_order.reserve(n);
  try {
    boost::topological_sort(g, std::back_inserter(reverse_order));
  } catch (const boost::not_a_dag&) {
    throw std::logic_error("critical path: the timing graph has a cycle (check_deadlock_free first)");
  }
  // ready: when its last predecessor (from) ended; start, end: its own.
  std::vector<double> ready(n, 0.0), start(n, 0.0), end(n, 0.0), length(n, 0.0);
  std::vector<Vertex> from(n, kNone);
  std::vector<Dependency> why(n, Dependency::kOrder);
  for (auto it = reverse_order.rbegin(); it != reverse_order.rend(); ++it) {
    const Vertex u = *it;
    const bool timed = measured != nullptr && measured->process[u] >= 0;
    length[u] = timed ? measured->duration[u] : g[u].duration_s;
    start[u] = timed ? measured->start[u] : ready[u];
    // A measured op cannot end before what it waited for (clocks of two ranks may disagree
    // by a little): it ends no earlier than that, so the path's time never runs backwards.
    end[u] = std::max(start[u] + length[u], ready[u]);
    for (const auto e : boost::make_iterator_range(boost::out_edges(u, g))) {
      const Vertex v = boost::target(e, g);
      if (from[v] == kNone || end[u] > ready[v]) {
        ready[v] = std::max(ready[v], end[u]);
        from[v] = u;
        why[v] = dependency_between(g[u], g[v]);
      }
    }
  }
  // Latest ends: what each vertex may take without moving the step's end.
  const double step = ready[tg.step_end];
  std::vector<double> latest_end(n, step);
  for (const Vertex u : reverse_order) {
    for (const auto e : boost::make_iterator_range(boost::out_edges(u, g))) {
      const Vertex v = boost::target(e, g);
      latest_end[u] = std::min(latest_end[u], latest_end[v] - length[v]);
    }
  }

  CriticalPath path;
  path.step_s = step;
  std::vector<Vertex> chain;
  std::vector<char> on_path(n, 0);
  for (Vertex v = from[tg.step_end]; v != kNone; v = from[v]) chain.push_back(v);
  std::reverse(chain.begin(), chain.end());
  double clock = 0;
  for (std::size_t k = 0; k < chain.size(); ++k) {
    const Vertex v = chain[k];
    on_path[v] = 1;
    const GraphVertex& gv = g[v];
    if (gv.role != VertexRole::kOp) continue;  // the pipeline's end: a join, no time of its own
    PathOp op;
    op.vertex = gv;
    op.vertex.parts = nullptr;  // points into the priced ranks, which need not outlive the path
    if (gv.parts != nullptr) op.parts = *gv.parts;
    op.what = describe_vertex(program, gv);
    op.start_s = std::max(start[v], ready[v]);
    op.duration_s = end[v] - op.start_s;
    if (process != nullptr) process->push_back(measured->process[v]);
    op.waited_for = why[v];
    if (from[v] != kNone) op.waited_on = describe_vertex(program, g[from[v]]);
    path.shares.waiting_s += std::max(0.0, start[v] - clock);
    clock = end[v];
    if (measured == nullptr) {
      if (gv.parts != nullptr) add_shares(path.shares, *gv.parts);
    } else if (gv.parts != nullptr && gv.duration_s > 0) {
      add_shares(path.shares, scaled(*gv.parts, op.duration_s / gv.duration_s));
    } else {
      const ProgramOp& step_op =
          program.ranks[static_cast<std::size_t>(gv.rank)].ops[static_cast<std::size_t>(gv.op)];
      (gv.body_op < 0 && step_op.is_message() ? path.shares.pp_comm_s : path.shares.other_s) +=
          op.duration_s;
    }
    path.ops.push_back(std::move(op));
  }
  path.shares.waiting_s += std::max(0.0, step - clock);

  std::vector<Vertex> off;
  for (Vertex v = 0; v < n; ++v) {
    if (on_path[v] == 0 && g[v].role == VertexRole::kOp && length[v] > 0) off.push_back(v);
  }
  const std::size_t keep = std::min(off_path, off.size());
  std::partial_sort(off.begin(), off.begin() + static_cast<std::ptrdiff_t>(keep), off.end(),
                    [&](Vertex a, Vertex b) {
                      return length[a] > length[b] || (length[a] == length[b] && a < b);
                    });
  for (std::size_t k = 0; k < keep; ++k) {
    const Vertex v = off[k];
    path.largest_off_path.push_back(
        {describe_vertex(program, g[v]), length[v], std::max(0.0, latest_end[v] - end[v])});
  }
  return path;
}

}  // namespace

CriticalPath critical_path(const Program& program, const std::vector<PricedRank>& priced,
                           SimulationMode mode, std::size_t off_path) {
  return path_through(program, timing_graph(program, priced, mode), nullptr, off_path);
}

MeasuredPath measured_critical_path(const Program& program, const std::vector<PricedRank>& priced,
                                    SimulationMode mode, const std::vector<MeasuredOp>& measured,
                                    std::size_t off_path) {
  const ProgramGraph tg = timing_graph(program, priced, mode);
  const DependencyGraph& g = tg.graph;
  const std::size_t n = boost::num_vertices(g);
  // [rank][op][body_op + 1]: the vertex of each op.
  std::map<std::tuple<std::int32_t, std::int32_t, std::int32_t>, Vertex> vertex_of;
  for (Vertex v = 0; v < n; ++v) {
    if (g[v].role == VertexRole::kOp) vertex_of[{g[v].rank, g[v].op, g[v].body_op}] = v;
  }
  VertexTimes times{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0),
                    std::vector<std::int64_t>(n, -1)};
  for (const MeasuredOp& m : measured) {
    const auto it = vertex_of.find({m.rank, m.op, m.body_op});
    if (it == vertex_of.end()) {
      throw ConfigError(fmt::format(
          "measured critical path: pipeline rank {} op {} body op {} is not an op of the plan's "
          "Program (a trace of another plan?)", m.rank, m.op, m.body_op));
    }
    if (times.process[it->second] >= 0) {
      throw ConfigError(fmt::format("measured critical path: {} was measured twice",
                                    describe_vertex(program, g[it->second])));
    }
    times.start[it->second] = m.start_s;
    times.duration[it->second] = m.duration_s;
    times.process[it->second] = std::max<std::int64_t>(m.process, 0);
  }
  for (const auto& [key, v] : vertex_of) {
    if (times.process[v] < 0) {
      throw ConfigError(fmt::format(
          "measured critical path: {} has no measured time (a trace of another plan, or cut short?)",
          describe_vertex(program, g[v])));
    }
  }
  MeasuredPath out;
  out.path = path_through(program, tg, &times, off_path, &out.process);
  return out;
}

}  // namespace strata
