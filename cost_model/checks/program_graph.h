// The cross-rank dependency graph of a Program (program.h) as a Boost.Graph graph:
// one vertex per op of every pipeline rank, one edge per "must end before it starts". Built
// here and nowhere else, from the Program the engine replays, in two flavours:
//
//   the check graph (dependency_graph)   step ops only (a pass is one vertex), each rank in
//       list order (how the CPU backend runs it, and at least as strict as the CUDA
//       backend's streams, so a cycle-free check graph is cycle-free on either), each
//       receive after the send of the same (peer, tag), each cross-rank collective joining
//       its members: a join vertex after every member's op and before the op that follows
//       each member's (no member leaves a collective before all have entered it). A cycle
//       here is a step that hangs (program_check.h).
//   the timing graph (timing_graph)      every op, pass bodies expanded per pass, weighted
//       with the durations the simulator priced (PricedRank), and exactly the simulator's
//       rules (program_simulator.h: streams or serial, rule 1's issue edges, the pipeline
//       end before the tails). Its longest path is the priced step time and the path is the
//       critical path (critical_path.h). Collectives are not joined there: the simulator
//       does not model them as barriers either.
//
// Why Boost.Graph and not the max-plus replay for pricing: the replay prices a pass in
// O(1) from its body's max-plus response (program_simulator.h), while this graph expands
// every body op of every micro-batch; the planner prices thousands of plans, so pricing
// stays with the replay, and the graph answers what the replay cannot (which chain, how
// much slack, does it hang). tests/cost_model/critical_path_test.cc checks the two agree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <boost/graph/compressed_sparse_row_graph.hpp>

#include "cost_model/checks/graph_vertex.h"
#include "cost_model/program/program.h"
#include "cost_model/program/program_simulator.h"
#include "cost_model/specs/step_report.h"

namespace strata {

// A compressed sparse row graph, made once from the vertices and edges found: the planner
// checks pipelines of 10^5 ops per shape, and an adjacency_list (one vector per vertex, one
// heap cell per edge's property) cost 3x as much to build as this. Edges carry no property:
// what an edge means follows from its two ends (dependency_between).
using DependencyGraph = boost::compressed_sparse_row_graph<boost::directedS, GraphVertex,
                                                           boost::no_property, boost::no_property,
                                                           std::uint32_t, std::uint32_t>;
using GraphVertexId = DependencyGraph::vertex_descriptor;

struct ProgramGraph {
  DependencyGraph graph;
  // [pp_rank][op]: the vertex of each step op (a pass: its start vertex).
  std::vector<std::vector<GraphVertexId>> step_vertex;
  GraphVertexId step_end = 0;  // the timing graph's kStepEnd
};

// The virtual stage that receives a message op of `rank` and the rank on the other side.
struct MessageEnds {
  std::int64_t receiver_vstage = 0;
  std::int64_t sender = 0, receiver = 0;  // pipeline ranks, from the op's own `peer`
  std::int64_t tag = 0;                   // pipeline_message_tag
};
MessageEnds message_ends(const Program& program, std::int64_t pp_rank, const ProgramOp& op);

// The members of the cross-rank collective `op` of rank `pp_rank` runs (pipeline ranks, in
// order), or an empty list when its group is within the rank's own replicas (the DP and TP
// peers of one pipeline rank replay the same RankProgram, so they agree by construction).
std::vector<std::int64_t> collective_members(const Program& program, const ProgramOp& op);

// The check graph. Throws ProgramDeadlock (program_check.h) when a message has no partner or
// an `after` points outside its list: those are faults the graph cannot even be built with.
ProgramGraph dependency_graph(const Program& program);

// The timing graph of `program` priced by `priced` ([pp_rank]: price_rank of that rank, in
// `mode`), with the rules of program_simulator.h.
ProgramGraph timing_graph(const Program& program, const std::vector<PricedRank>& priced,
                          SimulationMode mode);

// A pipeline skeleton as a Program of step ops only (no bodies, no tail), for the planner's
// check of a pipeline shape it prices through its skeleton (cost_model.h). Its messages have
// no shape (all 0 x 0): make_rank_program gives every message of a Program one shape and
// dtype, so a skeleton's could not disagree anyway.
Program skeleton_program(const PipelineSkeleton& skeleton);

// What an edge from `from` to `to` means (program_graph.cc's edges are made only so).
Dependency dependency_between(const GraphVertex& from, const GraphVertex& to);

// "rank 2 op 17 send_forward mb=3 chunk=1" (kOp; body ops add "/ compute layer5").
std::string describe_vertex(const Program& program, const GraphVertex& vertex);

}  // namespace strata
