// The schedule simulator: replays a Schedule (cost_model/schedule.h) as a task graph and
// returns when each op starts and ends on each pipeline rank, the step's makespan and the
// pipeline bubble. Durations come from the caller (the time model), so this file knows
// nothing about FLOPs or bandwidths; it only knows the dependency rules below.
//
// Dependency rules (one vertex per op, Boost.Graph underneath):
//  - ops on one rank run in list order: an op starts when the previous op on its rank ends,
//    except after a send, which is asynchronous: the next op may start as soon as the send
//    has been issued (its start), because the executor posts sends without waiting;
//  - a send's duration is the link transfer time; the matching receive ends no earlier than
//    the send ends (send start + transfer). A receive is posted when its rank reaches it,
//    and lasts max(its own duration, until the data has arrived): its wait is visible in the
//    timeline, like the executor's blocking receive;
//  - per-rank tail tasks (e.g. "dp_grad_sync", "optimizer_step") run in order after the
//    rank's last pipeline op, by the same rules.
// Each vertex starts at the max over its start constraints and ends at
// max(start + duration, its end constraints); one pass in topological order computes all
// times (the longest path). A cycle means the schedule deadlocks: InfeasiblePlan.
//
// Cost: linear in ops. p=64, v=4, m=512 (784,384 tasks) builds and solves in ~0.4 s on one
// core (Release); the planner should use closed forms per candidate and simulate the few
// it reports.
//
// Deliberately not modelled: link contention between concurrent transfers, compute slowed
// by overlapping communication, tail tasks synchronising across ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "cost_model/schedule.h"

namespace strata {

// Seconds each op takes on a pipeline rank. A send's duration is its transfer time; a
// receive's is its own cost once the data is there (0 is fine).
struct OpDurations {
  std::function<double(std::int64_t pp_rank, const PipelineOp& op)> duration_s;
};

// Work a rank does after its pipeline ops, in order.
struct TailTask {
  std::string name;        // e.g. "dp_grad_sync", "optimizer_step"
  double duration_s = 0;
};

// ---- the task graph: a small typed API over boost::adjacency_list ----

struct TaskVertex {
  std::int64_t pp_rank = 0;
  PipelineOp op;                // meaningless for tail tasks
  std::int32_t tail_index = -1; // index into the rank's tail tasks, -1 for pipeline ops
  double duration_s = 0;
};

enum class DependencyKind {
  kStartAfterEnd,    // to.start >= from.end
  kStartAfterStart,  // to.start >= from.start (the op after an asynchronous send)
  kEndAfterEnd,      // to.end   >= from.end   (a receive completes after its send's transfer)
};

struct TaskEdge {
  DependencyKind kind = DependencyKind::kStartAfterEnd;
};

struct TaskTimes {
  double start_s = 0;
  double end_s = 0;
};

class TaskGraph {
 public:
  // vecS everywhere: tasks and dependencies are only ever added, and a large pipeline has
  // ~10^6 of each, so per-edge list nodes would dominate the build time.
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS,
                                      TaskVertex, TaskEdge, boost::no_property, boost::vecS>;
  using Task = std::size_t;  // vertex index

  Task add_task(const TaskVertex& vertex);
  void add_dependency(Task from, Task to, DependencyKind kind);

  std::size_t num_tasks() const;
  std::size_t num_dependencies() const;
  const TaskVertex& task(Task t) const;

  // Earliest start/end of every task, indexed by Task. Throws InfeasiblePlan if the graph
  // has a cycle (a deadlocked schedule).
  std::vector<TaskTimes> earliest_times() const;

 private:
  Graph graph_;
};

// Builds the graph of a schedule: vertices for all ops of all ranks (rank-major, list
// order), then the tail tasks. tails may be empty or have one list per pipeline rank.
// Throws InfeasiblePlan if a send has no matching receive (or vice versa), ConfigError on a
// negative or non-finite duration or a tails list of the wrong size.
TaskGraph build_task_graph(const Schedule& schedule, const OpDurations& durations,
                           const std::vector<std::vector<TailTask>>& tails = {});

// ---- the simulation result ----

struct SimulatedOp {
  std::int64_t pp_rank = 0;
  std::string name;         // to_string(op.kind) for pipeline ops, the TailTask name otherwise
  PipelineOp op;            // meaningless when is_tail
  bool is_tail = false;
  double start_s = 0;
  double end_s = 0;
};

// Definitions (all in seconds, the step starting at 0):
//  makespan_s      the end of the last task, tails included: the step time.
//  pipeline_s      the end of the last pipeline op (tails excluded).
//  busy_s[r]       compute time of rank r: the sum of its forward and backward durations.
//  busiest_rank    the rank with the largest busy_s (lowest index on ties).
//  bubble_s        pipeline_s - busy_s[busiest_rank]: the idle time of the compute stream
//                  of the busiest rank during the pipeline (includes exposed p2p waits).
//  bubble_fraction bubble_s / busy_s[busiest_rank]: Megatron's bubble time over ideal time,
//                  (p - 1)/m for 1F1B and (p - 1)/(v m) for interleaved when all micro-batch
//                  ops take the same time and transfers are free. (StepReport's
//                  bubble_fraction is bubble_s / step time instead: the time model divides.)
struct SimulationResult {
  double makespan_s = 0;
  double pipeline_s = 0;
  std::vector<std::vector<SimulatedOp>> timeline;  // timeline[pp_rank], list order, tails last
  std::vector<double> busy_s;                      // [pp_rank]
  std::int64_t busiest_rank = 0;
  double bubble_s = 0;
  double bubble_fraction = 0;
};

SimulationResult simulate(const Schedule& schedule, const OpDurations& durations,
                          const std::vector<std::vector<TailTask>>& tails = {});

// Durations for tests and quick estimates: every forward of one chunk takes forward_s,
// every backward backward_s, every send transfer_s, receives 0.
OpDurations uniform_durations(double forward_s, double backward_s, double transfer_s = 0);

}  // namespace strata
