// The schedule simulator: builds the task graph of a Schedule (rules in simulator.h) and
// computes every task's earliest start and end in one pass over a topological order.
// Does not decide durations (the time model does) and does not check memory.
#include "cost_model/simulator.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <tuple>

#include <boost/graph/topological_sort.hpp>
#include <fmt/format.h>

#include "cost_model/errors.h"

namespace strata {

TaskGraph::Task TaskGraph::add_task(const TaskVertex& vertex) {
  return boost::add_vertex(vertex, graph_);
}

void TaskGraph::add_dependency(Task from, Task to, DependencyKind kind) {
  boost::add_edge(from, to, TaskEdge{kind}, graph_);
}

std::size_t TaskGraph::num_tasks() const { return boost::num_vertices(graph_); }
std::size_t TaskGraph::num_dependencies() const { return boost::num_edges(graph_); }
const TaskVertex& TaskGraph::task(Task t) const { return graph_[t]; }

std::vector<TaskTimes> TaskGraph::earliest_times() const {
  std::vector<Task> reversed;
  reversed.reserve(num_tasks());
  try {
    boost::topological_sort(graph_, std::back_inserter(reversed));
  } catch (const boost::not_a_dag&) {
    throw InfeasiblePlan(
        "task graph has a cycle: the schedule deadlocks (a receive waits on a send that comes "
        "after it)");
  }
  std::vector<TaskTimes> times(num_tasks());
  // topological_sort emits vertices in reverse topological order.
  for (auto it = reversed.rbegin(); it != reversed.rend(); ++it) {
    const Task v = *it;
    double start = 0;
    double end_floor = 0;
    for (auto [e, e_end] = boost::in_edges(v, graph_); e != e_end; ++e) {
      const TaskTimes& from = times[boost::source(*e, graph_)];
      switch (graph_[*e].kind) {
        case DependencyKind::kStartAfterEnd: start = std::max(start, from.end_s); break;
        case DependencyKind::kStartAfterStart: start = std::max(start, from.start_s); break;
        case DependencyKind::kEndAfterEnd: end_floor = std::max(end_floor, from.end_s); break;
      }
    }
    times[v] = {start, std::max(start + graph_[v].duration_s, end_floor)};
  }
  return times;
}

namespace {

bool is_send(OpKind kind) { return kind == OpKind::kSendForward || kind == OpKind::kSendBackward; }
bool is_recv(OpKind kind) { return kind == OpKind::kRecvForward || kind == OpKind::kRecvBackward; }

// A message is identified by its direction, micro-batch and the virtual stage that
// receives it: a forward send from stage s feeds stage s + 1, a backward send from s feeds
// s - 1.
using MessageKey = std::tuple<bool, std::int64_t, std::int64_t>;  // (forward?, mb, to stage)

MessageKey message_key(const Schedule& schedule, std::int64_t rank, const PipelineOp& op) {
  const std::int64_t s = schedule.virtual_stage(rank, op.chunk);
  switch (op.kind) {
    case OpKind::kSendForward: return {true, op.micro_batch, s + 1};
    case OpKind::kSendBackward: return {false, op.micro_batch, s - 1};
    case OpKind::kRecvForward: return {true, op.micro_batch, s};
    case OpKind::kRecvBackward: return {false, op.micro_batch, s};
    default: return {false, -1, -1};
  }
}

std::string describe(std::int64_t rank, const PipelineOp& op) {
  return fmt::format("{} of micro-batch {} chunk {} on pp rank {} (peer {})", to_string(op.kind),
                     op.micro_batch, op.chunk, rank, op.peer);
}

double checked_duration(double d, const std::string& what) {
  if (!std::isfinite(d) || d < 0) {
    throw ConfigError(fmt::format("simulator: duration of {} is {} but must be finite and >= 0",
                                  what, d));
  }
  return d;
}

}  // namespace

TaskGraph build_task_graph(const Schedule& schedule, const OpDurations& durations,
                           const std::vector<std::vector<TailTask>>& tails) {
  const std::size_t ranks = schedule.ops.size();
  if (!tails.empty() && tails.size() != ranks) {
    throw ConfigError(fmt::format("simulator: {} tail-task lists for {} pipeline ranks",
                                  tails.size(), ranks));
  }
  if (!durations.duration_s) throw ConfigError("simulator: OpDurations::duration_s is empty");

  TaskGraph graph;
  // Sends and receives waiting for their other half, by message.
  std::map<MessageKey, TaskGraph::Task> sends;
  std::map<MessageKey, TaskGraph::Task> recvs;
  std::vector<TaskGraph::Task> last_of_rank(ranks);
  std::vector<bool> rank_has_ops(ranks, false);

  const auto chain = [&](std::size_t r, TaskGraph::Task t) {
    if (rank_has_ops[r]) {
      const TaskGraph::Task prev = last_of_rank[r];
      const bool async_prev = graph.task(prev).tail_index < 0 && is_send(graph.task(prev).op.kind);
      graph.add_dependency(prev, t,
                           async_prev ? DependencyKind::kStartAfterStart
                                      : DependencyKind::kStartAfterEnd);
    }
    last_of_rank[r] = t;
    rank_has_ops[r] = true;
  };

  for (std::size_t r = 0; r < ranks; ++r) {
    const auto rank = static_cast<std::int64_t>(r);
    for (const PipelineOp& op : schedule.ops[r]) {
      const double d = checked_duration(durations.duration_s(rank, op), describe(rank, op));
      const TaskGraph::Task t = graph.add_task({rank, op, -1, d});
      chain(r, t);
      if (is_send(op.kind) || is_recv(op.kind)) {
        const MessageKey key = message_key(schedule, rank, op);
        auto& mine = is_send(op.kind) ? sends : recvs;
        auto& theirs = is_send(op.kind) ? recvs : sends;
        if (auto it = theirs.find(key); it != theirs.end()) {
          const TaskGraph::Task send = is_send(op.kind) ? t : it->second;
          const TaskGraph::Task recv = is_send(op.kind) ? it->second : t;
          graph.add_dependency(send, recv, DependencyKind::kEndAfterEnd);
          theirs.erase(it);
        } else if (!mine.emplace(key, t).second) {
          throw InfeasiblePlan(fmt::format("simulator: duplicate {}", describe(rank, op)));
        }
      }
    }
  }
  if (!sends.empty() || !recvs.empty()) {
    const bool send_left = !sends.empty();
    const TaskGraph::Task t = send_left ? sends.begin()->second : recvs.begin()->second;
    throw InfeasiblePlan(fmt::format("simulator: {} has no matching {}",
                                     describe(graph.task(t).pp_rank, graph.task(t).op),
                                     send_left ? "receive" : "send"));
  }
  for (std::size_t r = 0; r < tails.size(); ++r) {
    for (std::size_t i = 0; i < tails[r].size(); ++i) {
      const TailTask& tail = tails[r][i];
      const double d = checked_duration(
          tail.duration_s, fmt::format("tail task {} on pp rank {}", tail.name, r));
      chain(r, graph.add_task({static_cast<std::int64_t>(r), PipelineOp{},
                               static_cast<std::int32_t>(i), d}));
    }
  }
  return graph;
}

SimulationResult simulate(const Schedule& schedule, const OpDurations& durations,
                          const std::vector<std::vector<TailTask>>& tails) {
  const TaskGraph graph = build_task_graph(schedule, durations, tails);
  const std::vector<TaskTimes> times = graph.earliest_times();

  const std::size_t ranks = schedule.ops.size();
  SimulationResult result;
  result.timeline.resize(ranks);
  result.busy_s.assign(ranks, 0.0);
  // Tasks were added rank-major in list order, then tails rank-major: appending in index
  // order keeps each rank's timeline in list order with its tails last.
  for (std::size_t t = 0; t < graph.num_tasks(); ++t) {
    const TaskVertex& v = graph.task(t);
    const auto r = static_cast<std::size_t>(v.pp_rank);
    SimulatedOp op;
    op.pp_rank = v.pp_rank;
    op.is_tail = v.tail_index >= 0;
    op.name = op.is_tail ? tails[r][static_cast<std::size_t>(v.tail_index)].name
                         : to_string(v.op.kind);
    op.op = v.op;
    op.start_s = times[t].start_s;
    op.end_s = times[t].end_s;
    result.makespan_s = std::max(result.makespan_s, op.end_s);
    if (!op.is_tail) {
      result.pipeline_s = std::max(result.pipeline_s, op.end_s);
      if (v.op.kind == OpKind::kForward || v.op.kind == OpKind::kBackward) {
        result.busy_s[r] += v.duration_s;
      }
    }
    result.timeline[r].push_back(std::move(op));
  }
  for (std::size_t r = 0; r < ranks; ++r) {
    if (result.busy_s[r] > result.busy_s[static_cast<std::size_t>(result.busiest_rank)]) {
      result.busiest_rank = static_cast<std::int64_t>(r);
    }
  }
  if (ranks > 0) {
    const double busy = result.busy_s[static_cast<std::size_t>(result.busiest_rank)];
    result.bubble_s = std::max(0.0, result.pipeline_s - busy);
    result.bubble_fraction = busy > 0 ? result.bubble_s / busy : 0.0;
  }
  return result;
}

OpDurations uniform_durations(double forward_s, double backward_s, double transfer_s) {
  return OpDurations{[=](std::int64_t, const PipelineOp& op) {
    switch (op.kind) {
      case OpKind::kForward: return forward_s;
      case OpKind::kBackward: return backward_s;
      case OpKind::kSendForward:
      case OpKind::kSendBackward: return transfer_s;
      case OpKind::kRecvForward:
      case OpKind::kRecvBackward: return 0.0;
    }
    return 0.0;
  }};
}

}  // namespace strata
