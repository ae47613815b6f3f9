// The longest path of a timing graph (see critical_path.h): a topological order from
// Boost.Graph, then earliest ends forward (each vertex remembers the in-edge that set its
// start) and latest ends backward (the slack).
#include "cost_model/critical_path.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <stdexcept>

#include <boost/graph/topological_sort.hpp>
#include <boost/range/iterator_range.hpp>

#include "cost_model/program_graph.h"

namespace strata {
namespace {

using Vertex = GraphVertexId;
constexpr Vertex kNone = static_cast<Vertex>(-1);

void add_shares(PathShares& s, const StepTimeParts& t) {
  s.compute_s += t.forward_s + t.backward_s + t.recompute_s;
  s.tp_comm_s += t.tp_comm_s;
  s.pp_comm_s += t.pp_comm_s;
  s.dp_comm_s += t.dp_comm_s;
  s.offload_s += t.offload_s;
  s.optimizer_s += t.optimizer_s;
  s.other_s += t.bubble_s + t.other_s;
}

}  // namespace

CriticalPath critical_path(const Program& program, const std::vector<PricedRank>& priced,
                           SimulationMode mode, std::size_t off_path) {
  const ProgramGraph tg = timing_graph(program, priced, mode);
  const DependencyGraph& g = tg.graph;
  const std::size_t n = boost::num_vertices(g);
  std::vector<Vertex> reverse_order;
  reverse_order.reserve(n);
  try {
    boost::topological_sort(g, std::back_inserter(reverse_order));
  } catch (const boost::not_a_dag&) {
    throw std::logic_error("critical path: the timing graph has a cycle (check_deadlock_free first)");
  }
  std::vector<double> start(n, 0.0), end(n, 0.0);
  std::vector<Vertex> from(n, kNone);
  std::vector<Dependency> why(n, Dependency::kOrder);
  for (auto it = reverse_order.rbegin(); it != reverse_order.rend(); ++it) {
    const Vertex u = *it;
    end[u] = start[u] + g[u].duration_s;
    for (const auto e : boost::make_iterator_range(boost::out_edges(u, g))) {
      const Vertex v = boost::target(e, g);
      if (from[v] == kNone || end[u] > start[v]) {
        start[v] = std::max(start[v], end[u]);
        from[v] = u;
        why[v] = dependency_between(g[u], g[v]);
      }
    }
  }
  // Latest ends: what each vertex may take without moving the step's end.
  const double step = start[tg.step_end];
  std::vector<double> latest_end(n, step);
  for (const Vertex u : reverse_order) {
    for (const auto e : boost::make_iterator_range(boost::out_edges(u, g))) {
      const Vertex v = boost::target(e, g);
      latest_end[u] = std::min(latest_end[u], latest_end[v] - g[v].duration_s);
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
    op.start_s = start[v];
    op.duration_s = gv.duration_s;
    op.waited_for = why[v];
    if (from[v] != kNone) op.waited_on = describe_vertex(program, g[from[v]]);
    path.shares.waiting_s += std::max(0.0, start[v] - clock);
    clock = end[v];
    if (gv.parts != nullptr) add_shares(path.shares, *gv.parts);
    path.ops.push_back(std::move(op));
  }
  path.shares.waiting_s += std::max(0.0, step - clock);

  std::vector<Vertex> off;
  for (Vertex v = 0; v < n; ++v) {
    if (on_path[v] == 0 && g[v].role == VertexRole::kOp && g[v].duration_s > 0) off.push_back(v);
  }
  const std::size_t keep = std::min(off_path, off.size());
  std::partial_sort(off.begin(), off.begin() + static_cast<std::ptrdiff_t>(keep), off.end(),
                    [&](Vertex a, Vertex b) {
                      return g[a].duration_s > g[b].duration_s ||
                             (g[a].duration_s == g[b].duration_s && a < b);
                    });
  for (std::size_t k = 0; k < keep; ++k) {
    const Vertex v = off[k];
    path.largest_off_path.push_back(
        {describe_vertex(program, g[v]), g[v].duration_s, std::max(0.0, latest_end[v] - end[v])});
  }
  return path;
}

}  // namespace strata
