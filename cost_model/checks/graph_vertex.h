// A vertex of a Program's dependency graph (program_graph.h) and why an edge waits, apart
// from the graph itself: the critical path (critical_path.h), which cost_model.h and so most
// of strata include, names vertices, and Boost.Graph's headers (about 150k preprocessed lines)
// stay with the three files that build or walk the graph.
#pragma once

#include <cstdint>
#include <string>

#include "cost_model/specs/step_report.h"

namespace strata {

// Why an edge's head waits for its tail.
enum class Dependency : std::uint8_t {
  kOrder,        // an earlier op of its rank: before it on its stream (or its list), rule 1's
                 // compute issued before it, or named in its `after`
  kPassStart,    // a body op after the start of its pass
  kMessage,      // a receive after its send
  kCollective,   // a cross-rank collective's join (check graph only)
  kPipelineEnd,  // rule 3: the tails after every pass of every rank (timing graph only)
};
std::string to_string(Dependency dependency);

enum class VertexRole : std::uint8_t {
  kOp,           // an op of a rank: a step op (a pass: its start), a body op, a tail op
  kJoin,         // a collective's join (check graph)
  kPipelineEnd,  // every pass of every rank ended (timing graph)
  kStepEnd,      // every op ended (timing graph): its start is the step time
};

struct GraphVertex {
  VertexRole role = VertexRole::kOp;
  std::int32_t rank = -1;     // pipeline rank (kOp)
  std::int32_t op = -1;       // index into RankProgram::ops (kOp); the first member's (kJoin)
  std::int32_t body_op = -1;  // index into the pass's body ops; -1: the step op itself
  double duration_s = 0;      // timing graph: what the simulator priced
  const StepTimeParts* parts = nullptr;  // timing graph: its split (not owned; null: none)
};

}  // namespace strata
