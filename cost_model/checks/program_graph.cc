// The Program's dependency graphs (see program_graph.h for the two flavours and their rules).
#include "cost_model/checks/program_graph.h"

#include <algorithm>
#include <array>
#include <map>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cost_model/specs/partition.h"
#include "cost_model/checks/program_check.h"

namespace strata {
namespace {

using Kind = ProgramOpKind;
using Vertex = GraphVertexId;
constexpr Vertex kNone = static_cast<Vertex>(-1);

bool is_send(Kind k) { return k == Kind::kSendForward || k == Kind::kSendBackward; }
bool is_forward_message(Kind k) { return k == Kind::kSendForward || k == Kind::kRecvForward; }

// The graph's vertices and edges as they are found; the CSR graph is made once at the end.
struct GraphBuilder {
  std::vector<GraphVertex> vertices;
  std::vector<std::pair<Vertex, Vertex>> edges;
  std::vector<std::vector<Vertex>> step_vertex;
  Vertex step_end = 0;

  Vertex add(const GraphVertex& v) {
    vertices.push_back(v);
    return static_cast<Vertex>(vertices.size() - 1);
  }
  ProgramGraph finish() {
    ProgramGraph out;
    out.graph = DependencyGraph(boost::edges_are_unsorted_multi_pass, edges.begin(), edges.end(),
                                vertices.size());
    for (Vertex v = 0; v < vertices.size(); ++v) out.graph[v] = vertices[v];
    out.step_vertex = std::move(step_vertex);
    out.step_end = step_end;
    return out;
  }
};

void add_edge(GraphBuilder& g, Vertex from, Vertex to) {
  if (from == kNone || from == to) return;
  g.edges.emplace_back(from, to);
}

std::string describe_op(const Program& program, std::int32_t rank, std::int32_t index) {
  const ProgramOp& op = program.ranks[static_cast<std::size_t>(rank)].ops[static_cast<std::size_t>(index)];
  std::string s = fmt::format("rank {} op {} {}", rank, index, to_string(op.kind));
  if (op.micro_batch >= 0) s += fmt::format(" mb={}", op.micro_batch);
  if (op.chunk >= 0) s += fmt::format(" chunk={}", op.chunk);
  if (op.is_message()) s += fmt::format(" peer={}", op.peer);
  return s;
}

// Every step op a vertex, each rank's ops as they come.
void add_step_vertices(const Program& program, GraphBuilder& g) {
  std::size_t total = 0;
  for (const RankProgram& rank : program.ranks) total += rank.ops.size();
  g.vertices.resize(total);
  g.step_vertex.resize(program.ranks.size());
  Vertex next = 0;
  for (std::size_t r = 0; r < program.ranks.size(); ++r) {
    const auto& ops = program.ranks[r].ops;
    g.step_vertex[r].reserve(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      GraphVertex& v = g.vertices[next];
      v.rank = static_cast<std::int32_t>(r);
      v.op = static_cast<std::int32_t>(i);
      g.step_vertex[r].push_back(next++);
    }
  }
}

// The fault of a send and its receive that disagree on the message's shape or dtype, or "".
std::string shape_fault(const Program& program, std::int32_t send_rank, std::int32_t send_op,
                        std::int32_t recv_rank, std::int32_t recv_op, std::int64_t tag) {
  const ProgramOp& send = program.ranks[static_cast<std::size_t>(send_rank)].ops[static_cast<std::size_t>(send_op)];
  const ProgramOp& recv = program.ranks[static_cast<std::size_t>(recv_rank)].ops[static_cast<std::size_t>(recv_op)];
  if (send.message_rows == recv.message_rows && send.message_width == recv.message_width &&
      send.message_dtype == recv.message_dtype) {
    return {};
  }
  const std::int64_t b = program.plan.micro_batch;
  return fmt::format("deadlock: {} sends {} but {} receives {} (tag {}): a message's shape and "
                     "dtype must agree at both ends",
                     describe_op(program, send_rank, send_op), message_shape(send, b),
                     describe_op(program, recv_rank, recv_op), message_shape(recv, b), tag);
}

// Each receive after the send of the same (sender, receiver, tag) and of the same shape and
// dtype; throws ProgramDeadlock for a message without exactly one partner or whose two ends
// disagree on what it is. A sorted list, not a map: the planner checks
// pipelines of 10^5 messages (a map's node per message cost 4x the whole graph).
void add_message_edges(const Program& program, GraphBuilder& g) {
  struct End {
    std::int64_t sender, receiver, tag;
    bool send;
    std::int32_t rank, op;
    auto key() const { return std::tuple{sender, receiver, tag, !send}; }  // sends first
  };
  std::vector<End> ends;
  for (std::size_t r = 0; r < program.ranks.size(); ++r) {
    const auto& ops = program.ranks[r].ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (!ops[i].is_message()) continue;
      const MessageEnds e = message_ends(program, static_cast<std::int64_t>(r), ops[i]);
      ends.push_back({e.sender, e.receiver, e.tag, is_send(ops[i].kind),
                      static_cast<std::int32_t>(r), static_cast<std::int32_t>(i)});
    }
  }
  std::sort(ends.begin(), ends.end(), [](const End& a, const End& b) { return a.key() < b.key(); });
  for (std::size_t i = 0; i < ends.size();) {
    std::size_t j = i;
    std::size_t sends = 0;
    while (j < ends.size() && ends[j].sender == ends[i].sender &&
           ends[j].receiver == ends[i].receiver && ends[j].tag == ends[i].tag) {
      sends += ends[j].send ? 1 : 0;
      ++j;
    }
    const std::size_t receives = j - i - sends;
    const End& first = ends[i];
    if (sends == 1 && receives == 1) {
      const End& recv = ends[i + 1];
      if (std::string fault = shape_fault(program, first.rank, first.op, recv.rank, recv.op, first.tag);
          !fault.empty()) {
        throw ProgramDeadlock(fault);
      }
      add_edge(g, g.step_vertex[static_cast<std::size_t>(first.rank)][static_cast<std::size_t>(first.op)],
               g.step_vertex[static_cast<std::size_t>(recv.rank)][static_cast<std::size_t>(recv.op)]);
      i = j;
      continue;
    }
    std::string fault;
    if (sends == 0) {
      fault = "has no matching send";
    } else if (receives == 0) {
      fault = "has no matching receive";
    } else {
      fault = fmt::format("shares its message with {} send(s) and {} receive(s), expected one each",
                          sends, receives);
    }
    throw ProgramDeadlock(fmt::format("deadlock: {} (from rank {} to rank {}, tag {}) {}",
                                      describe_op(program, first.rank, first.op), first.sender,
                                      first.receiver, first.tag, fault));
  }
}

// Each cross-rank collective: a join after every member's op, before each member's next op.
void add_collective_joins(const Program& program, GraphBuilder& g) {
  // [members][k]: the k-th instance of that (kind, members) on each member rank.
  std::map<std::pair<Kind, std::vector<std::int64_t>>, std::map<std::int64_t, std::vector<std::int32_t>>>
      instances;
  for (std::size_t r = 0; r < program.ranks.size(); ++r) {
    const auto& ops = program.ranks[r].ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      std::vector<std::int64_t> members = collective_members(program, ops[i]);
      if (members.empty()) continue;
      instances[{ops[i].kind, std::move(members)}][static_cast<std::int64_t>(r)].push_back(
          static_cast<std::int32_t>(i));
    }
  }
  for (const auto& [group, by_rank] : instances) {
    const auto& [kind, members] = group;
    std::size_t count = 0;
    for (const auto& [r, ops] : by_rank) count = std::max(count, ops.size());
    for (std::int64_t m : members) {
      const auto it = by_rank.find(m);
      const std::size_t entered = it == by_rank.end() ? 0 : it->second.size();
      if (entered != count) {
        throw ProgramDeadlock(fmt::format(
            "deadlock: {} over pipeline ranks {} is entered {} time(s) by rank {} but {} time(s) "
            "by another member", to_string(kind), fmt::join(members, ","), entered, m, count));
      }
    }
    for (std::size_t k = 0; k < count; ++k) {
      GraphVertex join;
      join.role = VertexRole::kJoin;
      join.rank = static_cast<std::int32_t>(members.front());
      join.op = by_rank.at(members.front())[k];
      const Vertex j = g.add(join);
      for (std::int64_t m : members) {
        const auto r = static_cast<std::size_t>(m);
        const auto i = static_cast<std::size_t>(by_rank.at(m)[k]);
        add_edge(g, g.step_vertex[r][i], j);
        if (i + 1 < g.step_vertex[r].size()) add_edge(g, j, g.step_vertex[r][i + 1]);
      }
    }
  }
}

// ---- the timing graph ----

// One rank's replay state: the last vertex of each stream (streams mode) or of the one
// clock (serial mode).
struct RankLanes {
  std::array<Vertex, kStreamCount> stream{kNone, kNone, kNone, kNone, kNone};
  Vertex& of(Stream s) { return stream[static_cast<std::size_t>(s)]; }
};

Vertex add_op_vertex(GraphBuilder& g, std::int32_t rank, std::int32_t op, std::int32_t body_op,
                     double seconds, const StepTimeParts* parts) {
  GraphVertex v;
  v.rank = rank;
  v.op = op;
  v.body_op = body_op;
  v.duration_s = seconds;
  v.parts = parts;
  return g.add(v);
}

}  // namespace

Dependency dependency_between(const GraphVertex& from, const GraphVertex& to) {
  if (from.role == VertexRole::kPipelineEnd) return Dependency::kPipelineEnd;
  if (from.role == VertexRole::kJoin || to.role == VertexRole::kJoin) return Dependency::kCollective;
  if (from.rank != to.rank) return Dependency::kMessage;
  if (to.body_op >= 0 && from.op == to.op && from.body_op < 0) return Dependency::kPassStart;
  return Dependency::kOrder;
}

std::string to_string(Dependency dependency) {
  switch (dependency) {
    case Dependency::kOrder: return "its rank's order";
    case Dependency::kPassStart: return "pass start";
    case Dependency::kMessage: return "message";
    case Dependency::kCollective: return "collective";
    case Dependency::kPipelineEnd: return "pipeline end";
  }
  return "unknown";
}

MessageEnds message_ends(const Program& program, std::int64_t pp_rank, const ProgramOp& op) {
  const std::int64_t pp = program.plan.pp;
  const std::int64_t vs = virtual_stage_of(pp, pp_rank, op.chunk);
  const bool forward = is_forward_message(op.kind);
  MessageEnds e;
  if (is_send(op.kind)) {
    e.receiver_vstage = forward ? vs + 1 : vs - 1;
    e.sender = pp_rank;
    e.receiver = op.peer;
  } else {
    e.receiver_vstage = vs;
    e.sender = op.peer;
    e.receiver = pp_rank;
  }
  e.tag = pipeline_message_tag(pp, program.plan.virtual_stages, op.micro_batch, e.receiver_vstage,
                               forward);
  return e;
}

std::vector<std::int64_t> collective_members(const Program& program, const ProgramOp& op) {
  const std::int64_t pp = static_cast<std::int64_t>(program.ranks.size());
  if (pp < 2) return {};
  if (op.kind == Kind::kTiedEmbeddingSum) return {0, pp - 1};
  if (op.kind == Kind::kGradNorm) {
    std::vector<std::int64_t> all(static_cast<std::size_t>(pp));
    for (std::int64_t r = 0; r < pp; ++r) all[static_cast<std::size_t>(r)] = r;
    return all;
  }
  return {};
}

ProgramGraph dependency_graph(const Program& program) {
  GraphBuilder g;
  add_step_vertices(program, g);
  for (std::size_t r = 0; r < program.ranks.size(); ++r) {
    const auto& ops = program.ranks[r].ops;
    const auto& vertex = g.step_vertex[r];
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (i > 0) add_edge(g, vertex[i - 1], vertex[i]);
      for (std::int32_t a : ops[i].after) {
        if (a < 0) continue;
        if (static_cast<std::size_t>(a) >= ops.size()) {
          throw ProgramDeadlock(fmt::format("deadlock: {} waits for op {}, outside its {} ops",
                                            describe_op(program, static_cast<std::int32_t>(r),
                                                        static_cast<std::int32_t>(i)),
                                            a, ops.size()));
        }
        // The op right before is already an edge (list order): most `after`s name it.
        if (static_cast<std::size_t>(a) + 1 != i) {
          add_edge(g, vertex[static_cast<std::size_t>(a)], vertex[i]);
        }
      }
    }
  }
  add_message_edges(program, g);
  add_collective_joins(program, g);
  return g.finish();
}

ProgramGraph timing_graph(const Program& program, const std::vector<PricedRank>& priced,
                          SimulationMode mode) {
  if (priced.size() != program.ranks.size()) {
    throw std::logic_error(fmt::format("timing graph: {} priced ranks for {} pipeline ranks",
                                       priced.size(), program.ranks.size()));
  }
  const bool serial = mode == SimulationMode::kSerial;
  GraphBuilder g;
  add_step_vertices(program, g);
  GraphVertex end;
  end.role = VertexRole::kPipelineEnd;
  const Vertex pipeline_end = g.add(end);
  end.role = VertexRole::kStepEnd;
  g.step_end = g.add(end);
  add_edge(g, pipeline_end, g.step_end);
  for (std::size_t r = 0; r < program.ranks.size(); ++r) {
    const RankProgram& rank = program.ranks[r];
    const PricedRank& pr = priced[r];
    if (pr.program != &rank || pr.mode != mode) {
      throw std::logic_error("timing graph: a priced rank is not its Program's or not in this mode");
    }
    const auto rank_id = static_cast<std::int32_t>(r);
    const auto& vertex = g.step_vertex[r];
    // What an op that names step op i in its `after` waits for: a pass's compute (rule 2).
    std::vector<Vertex> done(vertex.begin(), vertex.end());
    RankLanes lanes;
    Vertex& clock = lanes.of(Stream::kCompute);  // serial mode: the one clock
    Vertex last_pass_end = kNone;                // serial mode: the pipeline end's input
    const auto wait_for_afters = [&](std::size_t i, Vertex v) {
      for (std::int32_t a : rank.ops[i].after) {
        if (a >= 0) add_edge(g, done[static_cast<std::size_t>(a)], v);
      }
    };
    // The last step's carried host steps (program.h, "carried"): from the step's start, one
    // after another on the host thread, each before the first use that waits for it.
    const std::size_t carried_from = rank.first_carried_in_tail();
    std::vector<Vertex> carried(rank.carried_waits.size(), kNone);
    for (std::size_t w = 0; w < carried.size(); ++w) {
      const Vertex v = vertex[static_cast<std::size_t>(rank.carried_begin) + w];
      g.vertices[v].duration_s = pr.tail_times[carried_from + w].sum();
      g.vertices[v].parts = &pr.tail_times[carried_from + w];
      if (w > 0) add_edge(g, carried[w - 1], v);
      add_edge(g, v, g.step_end);
      carried[w] = v;
    }
    for (std::size_t i = 0; i < static_cast<std::size_t>(rank.tail_begin); ++i) {
      const ProgramOp& op = rank.ops[i];
      const Vertex v = vertex[i];
      wait_for_afters(i, v);
      if (op.is_pass()) {
        add_edge(g, clock, v);
        const PricedBody& body = pr.bodies[static_cast<std::size_t>(op.body)];
        std::vector<Vertex> body_vertex(body.op_s.size(), kNone);
        Vertex compute = v;  // the pass's compute lane: its start, then its compute ops
        for (std::size_t k = 0; k < body.op_s.size(); ++k) {
          const ProgramOp& bop = body.body->ops[k];
          const Vertex b = add_op_vertex(g, rank_id, static_cast<std::int32_t>(i),
                                         static_cast<std::int32_t>(k), body.op_s[k], &body.op_times[k]);
          body_vertex[k] = b;
          add_edge(g, v, b);
          for (std::size_t w = 0; w < carried.size(); ++w) {
            const RankProgram::CarriedWait& wait = rank.carried_waits[w];
            if (static_cast<std::size_t>(wait.op) == i && static_cast<std::size_t>(wait.body_op) == k) {
              add_edge(g, carried[w], b);
            }
          }
          if (serial) {
            add_edge(g, compute, b);
            compute = b;
          } else {
            const Stream stream = body_stream(bop);
            Vertex& lane = stream == Stream::kCompute ? compute : lanes.of(stream);
            add_edge(g, lane, b);
            if (stream != Stream::kCompute) add_edge(g, compute, b);
            for (std::int32_t a : bop.after) {
              if (a >= 0) add_edge(g, body_vertex[static_cast<std::size_t>(a)], b);
            }
            lane = b;
          }
        }
        clock = compute;
        done[i] = compute;
        last_pass_end = compute;
      } else {
        // A message: its stream (p2p, after the compute issued before it), or the one clock.
        if (serial) {
          add_edge(g, clock, v);
          clock = v;
        } else {
          add_edge(g, lanes.of(Stream::kP2p), v);
          add_edge(g, clock, v);
          lanes.of(Stream::kP2p) = v;
        }
        if (is_send(op.kind)) {
          const std::size_t dir = op.kind == Kind::kSendForward ? 0 : 1;
          const auto c = static_cast<std::size_t>(op.chunk);
          g.vertices[v].duration_s = pr.transfer_s[c][dir];
          g.vertices[v].parts = &pr.transfer[c][dir];
        }
      }
    }
    // Rule 3: the pipeline ends when every pass with all its body ops has.
    if (serial) {
      add_edge(g, last_pass_end, pipeline_end);
    } else {
      for (Stream s : {Stream::kCompute, Stream::kComm, Stream::kCopy}) {
        add_edge(g, lanes.of(s), pipeline_end);
      }
    }
    // The tail, from the pipeline's end on free streams.
    RankLanes tail;
    Vertex tail_clock = kNone;
    for (std::size_t k = 0; k < carried_from; ++k) {
      const std::size_t i = static_cast<std::size_t>(rank.tail_begin) + k;
      const ProgramOp& op = rank.ops[i];
      const Vertex v = vertex[i];
      g.vertices[v].duration_s = pr.tail_times[k].sum();
      g.vertices[v].parts = &pr.tail_times[k];
      add_edge(g, pipeline_end, v);
      if (serial) {
        add_edge(g, tail_clock, v);
        tail_clock = v;
      } else {
        add_edge(g, tail.of(op.stream), v);
        if (op.stream != Stream::kCompute) add_edge(g, tail.of(Stream::kCompute), v);
        for (std::int32_t a : op.after) {
          if (a >= rank.tail_begin) add_edge(g, vertex[static_cast<std::size_t>(a)], v);
        }
        tail.of(op.stream) = v;
      }
      add_edge(g, v, g.step_end);
    }
  }
  // Receives after their sends (the same matching as the check graph's).
  add_message_edges(program, g);
  return g.finish();
}

Program skeleton_program(const PipelineSkeleton& skeleton) {
  Program program;
  program.plan.pp = skeleton.pp;
  program.plan.virtual_stages = skeleton.virtual_stages;
  program.plan.schedule = skeleton.kind;
  program.micro_batches = skeleton.micro_batches;
  const std::int64_t pp = skeleton.pp;
  const std::int64_t stages = pp * skeleton.virtual_stages;
  for (std::size_t r = 0; r < skeleton.ranks.size(); ++r) {
    RankProgram rank;
    rank.pp_rank = static_cast<std::int64_t>(r);
    rank.ops.reserve(skeleton.ranks[r].size());
    for (const PipelineStep& step : skeleton.ranks[r]) {
      ProgramOp op;
      op.kind = step.kind;
      op.micro_batch = step.micro_batch;
      op.chunk = step.chunk;
      op.after = step.after;
      op.stream = op.is_message() ? Stream::kP2p : Stream::kCompute;
      if (op.is_message()) {
        // The rank on the other side: the next virtual stage forward, the previous backward.
        const std::int64_t vs = virtual_stage_of(pp, rank.pp_rank, step.chunk);
        const bool toward_next = step.kind == Kind::kSendForward || step.kind == Kind::kRecvBackward;
        const std::int64_t other = toward_next ? vs + 1 : vs - 1;
        op.peer = static_cast<std::int32_t>(((other % stages) + stages) % stages % pp);  // in range: the skeleton checked it
      }
      rank.ops.push_back(op);
    }
    rank.tail_begin = static_cast<std::int32_t>(rank.ops.size());
    program.ranks.push_back(std::move(rank));
  }
  return program;
}

std::string describe_vertex(const Program& program, const GraphVertex& vertex) {
  switch (vertex.role) {
    case VertexRole::kPipelineEnd: return "the pipeline's end";
    case VertexRole::kStepEnd: return "the step's end";
    case VertexRole::kJoin:
      return "the collective of " + describe_op(program, vertex.rank, vertex.op);
    case VertexRole::kOp: break;
  }
  std::string s = describe_op(program, vertex.rank, vertex.op);
  if (vertex.body_op >= 0) {
    const RankProgram& rank = program.ranks[static_cast<std::size_t>(vertex.rank)];
    const ProgramOp& pass = rank.ops[static_cast<std::size_t>(vertex.op)];
    const ProgramOp& op =
        rank.bodies[static_cast<std::size_t>(pass.body)].ops[static_cast<std::size_t>(vertex.body_op)];
    s += " / " + to_string(op.kind);
    if (op.unit >= 0) s += " " + rank.units[static_cast<std::size_t>(op.unit)].name;
  } else {
    const ProgramOp& op =
        program.ranks[static_cast<std::size_t>(vertex.rank)].ops[static_cast<std::size_t>(vertex.op)];
    if (op.unit >= 0) {
      s += " " + program.ranks[static_cast<std::size_t>(vertex.rank)].units[static_cast<std::size_t>(op.unit)].name;
    }
  }
  return s;
}

}  // namespace strata
