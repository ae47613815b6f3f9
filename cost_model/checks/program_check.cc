// The deadlock check (see program_check.h): the collectives' relative order, then the check
// graph's messages and collective joins (program_graph.cc), then a depth-first search for a
// cycle, reported with its ops rank by rank.
#include "cost_model/checks/program_check.h"

#include <algorithm>
#include <optional>
#include <vector>

#include <boost/graph/depth_first_search.hpp>
#include <fmt/format.h>

#include "cost_model/checks/program_graph.h"

namespace strata {
namespace {

// The cross-rank collectives a rank enters, in its list order.
struct Entered {
  ProgramOpKind kind;
  std::vector<std::int64_t> members;
  bool operator==(const Entered&) const = default;
};

std::string names(const std::vector<Entered>& seq) {
  std::string s;
  for (const Entered& e : seq) s += (s.empty() ? "" : ", ") + to_string(e.kind);
  return s.empty() ? "none" : s;
}

// Any two ranks enter the collectives they share in the same order.
void check_collective_order(const Program& program) {
  const std::size_t p = program.ranks.size();
  std::vector<std::vector<Entered>> entered(p);
  for (std::size_t r = 0; r < p; ++r) {
    for (const ProgramOp& op : program.ranks[r].ops) {
      std::vector<std::int64_t> members = collective_members(program, op);
      if (!members.empty()) entered[r].push_back({op.kind, std::move(members)});
    }
  }
  const auto shared_with = [&](std::size_t r, std::size_t other) {
    std::vector<Entered> seq;
    for (const Entered& e : entered[r]) {
      if (std::find(e.members.begin(), e.members.end(), static_cast<std::int64_t>(other)) != e.members.end()) {
        seq.push_back(e);
      }
    }
    return seq;
  };
  for (std::size_t r = 0; r < p; ++r) {
    for (std::size_t s = r + 1; s < p; ++s) {
      const auto a = shared_with(r, s);
      const auto b = shared_with(s, r);
      if (a.size() == b.size() && a != b) {
        throw ProgramDeadlock(fmt::format(
            "deadlock: pipeline ranks {} and {} enter their collectives in different orders: "
            "rank {} enters {}; rank {} enters {}", r, s, r, names(a), s, names(b)));
      }
    }
  }
}

// Stops the search at the first back edge: the cycle is its target, the tree path down to
// its source, and the back edge.
struct CycleFound {
  GraphVertexId from, to;
};
class CycleVisitor : public boost::default_dfs_visitor {
 public:
  explicit CycleVisitor(std::vector<GraphVertexId>& parent) : parent_(&parent) {}
  void tree_edge(DependencyGraph::edge_descriptor e, const DependencyGraph& g) const {
    (*parent_)[boost::target(e, g)] = boost::source(e, g);
  }
  void back_edge(DependencyGraph::edge_descriptor e, const DependencyGraph& g) const {
    throw CycleFound{boost::source(e, g), boost::target(e, g)};
  }

 private:
  std::vector<GraphVertexId>* parent_;
};

std::optional<std::vector<GraphVertexId>> find_cycle(const DependencyGraph& g) {
  std::vector<GraphVertexId> parent(boost::num_vertices(g));
  try {
    boost::depth_first_search(g, boost::visitor(CycleVisitor(parent)));
  } catch (const CycleFound& found) {
    std::vector<GraphVertexId> cycle{found.from};
    for (GraphVertexId v = found.from; v != found.to;) {
      v = parent[v];
      cycle.push_back(v);
    }
    std::reverse(cycle.begin(), cycle.end());  // to ... from, then the back edge to `to`
    return cycle;
  }
  return std::nullopt;
}

// "rank 0: op 4 recv_backward mb=0 chunk=0 peer=1, op 5 ...; rank 1: ..." in cycle order.
std::string describe_cycle(const Program& program, const DependencyGraph& g,
                           const std::vector<GraphVertexId>& cycle) {
  std::string out;
  std::int32_t rank = -2;
  for (GraphVertexId v : cycle) {
    const GraphVertex& gv = g[v];
    std::string what = describe_vertex(program, gv);
    const std::string prefix = fmt::format("rank {} ", gv.rank);
    if (gv.role == VertexRole::kOp && gv.rank == rank && what.rfind(prefix, 0) == 0) {
      out += ", " + what.substr(prefix.size());
      continue;
    }
    out += (out.empty() ? "" : "; ") + what;
    rank = gv.role == VertexRole::kOp ? gv.rank : -2;
  }
  return out;
}

}  // namespace

void check_deadlock_free(const Program& program) {
  check_collective_order(program);
  const ProgramGraph graph = dependency_graph(program);
  const auto cycle = find_cycle(graph.graph);
  if (cycle) {
    throw ProgramDeadlock(fmt::format(
        "deadlock: {} ops wait for each other in a cycle: {} (and back to the first)",
        cycle->size(), describe_cycle(program, graph.graph, *cycle)));
  }
}

std::string deadlock_fault(const Program& program) {
  try {
    check_deadlock_free(program);
  } catch (const ProgramDeadlock& e) {
    return e.what();
  }
  return {};
}

}  // namespace strata
