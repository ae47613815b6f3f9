// The schedule simulator: builds the task graph of a Schedule (rules in simulator.h) and
// computes every task's earliest start and end in one pass over a topological order.
// Does not decide durations (the time model does) and does not check memory.
#include "cost_model/simulator.h"

#include <algorithm>
#include <cmath>
#include <iterator>

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
// s - 1. Packed into one index, (direction * m + micro_batch) * stages + to_stage, so that
// matching is a vector lookup (a large pipeline has ~10^6 ops); -1 for a malformed op.
std::int64_t message_index(const Schedule& schedule, std::int64_t rank, const PipelineOp& op) {
  const std::int64_t stages = schedule.num_virtual_stages();
  const std::int64_t s = schedule.virtual_stage(rank, op.chunk);
  const bool forward = op.kind == OpKind::kSendForward || op.kind == OpKind::kRecvForward;
  std::int64_t to = s;
  if (op.kind == OpKind::kSendForward) to = s + 1;
  if (op.kind == OpKind::kSendBackward) to = s - 1;
  if (op.micro_batch < 0 || op.micro_batch >= schedule.micro_batches || op.chunk < 0 ||
      op.chunk >= schedule.virtual_stages || to < 0 || to >= stages) {
    return -1;
  }
  return ((forward ? 1 : 0) * schedule.micro_batches + op.micro_batch) * stages + to;
}

std::string describe(std::int64_t rank, const PipelineOp& op) {
  return fmt::format("{} of micro-batch {} chunk {} on pp rank {} (peer {})", to_string(op.kind),
                     op.micro_batch, op.chunk, rank, op.peer);
}

// `what` is only called to build the message (formatting a name per op would dominate
// the build time of a large graph).
template <typename Describe>
double checked_duration(double d, const Describe& what) {
  if (!std::isfinite(d) || d < 0) {
    throw ConfigError(fmt::format("simulator: duration of {} is {} but must be finite and >= 0",
                                  what(), d));
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
  // Per message: the send or receive still waiting for its other half (kNone when neither
  // or both have been seen), and whether each half has been seen.
  constexpr TaskGraph::Task kNone = static_cast<TaskGraph::Task>(-1);
  const std::size_t messages =
      static_cast<std::size_t>(2 * schedule.micro_batches * schedule.num_virtual_stages());
  std::vector<TaskGraph::Task> waiting(messages, kNone);
  std::vector<std::uint8_t> seen(messages, 0);  // bit 0: send seen, bit 1: receive seen
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
      const double d = checked_duration(durations.duration_s(rank, op),
                                        [&] { return describe(rank, op); });
      const TaskGraph::Task t = graph.add_task({rank, op, -1, d});
      chain(r, t);
      if (!is_send(op.kind) && !is_recv(op.kind)) continue;
      const std::int64_t index = message_index(schedule, rank, op);
      if (index < 0) {
        throw InfeasiblePlan(fmt::format("simulator: {} is outside the schedule's {} stages x {} "
                                         "micro-batches",
                                         describe(rank, op), schedule.num_virtual_stages(),
                                         schedule.micro_batches));
      }
      const auto i = static_cast<std::size_t>(index);
      const std::uint8_t bit = is_send(op.kind) ? 1 : 2;
      if (seen[i] & bit) throw InfeasiblePlan(fmt::format("simulator: duplicate {}", describe(rank, op)));
      seen[i] |= bit;
      if (waiting[i] == kNone) {
        waiting[i] = t;
      } else {
        const TaskGraph::Task other = waiting[i];
        graph.add_dependency(is_send(op.kind) ? t : other, is_send(op.kind) ? other : t,
                             DependencyKind::kEndAfterEnd);
        waiting[i] = kNone;
      }
    }
  }
  for (std::size_t i = 0; i < messages; ++i) {
    if (waiting[i] != kNone) {
      const TaskVertex& v = graph.task(waiting[i]);
      throw InfeasiblePlan(fmt::format("simulator: {} has no matching {}",
                                       describe(v.pp_rank, v.op),
                                       is_send(v.op.kind) ? "receive" : "send"));
    }
  }
  for (std::size_t r = 0; r < tails.size(); ++r) {
    for (std::size_t i = 0; i < tails[r].size(); ++i) {
      const TailTask& tail = tails[r][i];
      const double d = checked_duration(
          tail.duration_s, [&] { return fmt::format("tail task {} on pp rank {}", tail.name, r); });
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
