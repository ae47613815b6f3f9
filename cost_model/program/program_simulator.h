// The Program simulator: replays a Program (program.h) given the duration of every op, and
// returns when each op starts and ends, the step time, and where the step time went on the
// critical rank. predict() is this simulation (cost_model.h); op_costs.h prices the ops
// from the time model. This file knows nothing of FLOPs or bandwidths: only program.h's
// ordering rules and the two ways a backend runs them.
//
// Streams (SimulationMode::kStreams, the CUDA backend): every rank has five stream clocks
// (compute, comm, copy, p2p, host), and
//   1. an op starts after the op before it on its stream: a rank's ops are issued in list
//      order, a pass's body ops where the pass stands, so a pass's trailing reductions or
//      offloads delay the next op of their stream, maybe in a later pass;
//   2. an op starts after the ops its `after` names; a pass named there stands for its
//      compute-stream ops (a send waits for what it sends is computed, not for the pass's
//      reductions, which may still be running: program.h's rule 2);
//   3. the tail starts when every pass of every rank, with all its body ops, has ended: the
//      tail does not overlap the pipeline (the step's tied sum and global norm synchronise
//      the ranks);
//   and a body op starts no earlier than its pass; a pass ends when its compute-stream
//   body ops end (its comm/copy ops may run on after it); a send takes its transfer time
//   on the sender's p2p stream, not its compute stream; a receive occupies the receiver's
//   p2p stream from when it is issued until the matching send has ended.
// Serial (SimulationMode::kSerial, the CPU backend: strata's CPU executor runs every op of
// a rank in list order as a blocking call on one thread): a rank's streams collapse into
// one clock; a pass is its body ops one after the other; a send blocks for its transfer; a
// receive ends no earlier than its send; the tail starts as above.
//
// How it stays linear in the pipeline and cheap per micro-batch: a pass's body is the same
// for every micro-batch it applies to (program.h), and every body op's end is a max-plus
// expression of three inputs, the pass's start s and the comm and copy streams' free times
// C and Y: end = max(s + a, C + b, Y + c). So each body is reduced once (BodyResponse) to
// the gains of its four outputs (compute end, comm and copy free times, last body op end),
// and the pipeline is replayed pass by pass. This is exact, not an approximation: expanding
// a pass op by op from the same inputs gives the same times (tested). Body ops are
// expanded only for the ranks whose timeline is asked for, and for the critical rank.
//
// Where the step time went (StepTimeParts, the Prediction's parts): the exposed time on the
// critical rank, i.e. the rank whose step ends last (the lowest one on ties; what a measured
// RunReport takes too: the slowest rank's step). Its timeline [0, step] is cut at every op
// boundary and each piece goes to the first of these that runs then:
//   an op on its compute stream  -> that op's own split (a layer's backward: backward,
//                                   recompute and TP collectives in proportion);
//   else an op on its comm stream  (gathers, reductions, tied sum, norm: dp_comm_s; norm
//                                   sums over TP: tp_comm_s), then its host stream (CPU
//                                   optimizer step), then its copy stream (offload_s), then
//                                   a send in transfer (pp_comm_s);
//   else a receive: while its message is in transfer pp_comm_s, before that bubble_s;
//   else (waiting for the pipeline, or for other ranks before the tail) bubble_s.
// So the parts sum to the step time, a collective hidden under compute counts nowhere,
// and bubble_s is the critical rank's idle time: (p - 1)/(v m) of its compute for uniform
// stages and free transfers (Narayanan et al. 2021), as the tests check.
//
// Deliberately not modelled: link contention between streams or between concurrent
// collectives of different groups, compute slowed by overlapping communication, the
// world-wide collectives of the tail as barriers between ranks (each rank's tail runs on
// its own clocks from the common tail start).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/program/program.h"
#include "cost_model/specs/step_report.h"

namespace strata {

enum class SimulationMode : std::uint8_t {
  kStreams,  // concurrent streams per rank (CUDA backend)
  kSerial,   // one clock per rank, every op blocking (CPU backend)
};
SimulationMode simulation_mode(Backend backend);  // kCpu -> kSerial, kCuda -> kStreams
std::string to_string(SimulationMode mode);       // "streams" | "serial"

// The duration of every op, split into the parts of StepTimeParts it counts toward (a
// layer's backward: backward_s, recompute_s, tp_comm_s; a gather: dp_comm_s; ...). The
// total is StepTimeParts::sum(). An op's cost may depend on its rank, kind, part, unit and
// chunk, never on the micro-batch (bodies are shared by micro-batches).
class OpCosts {
 public:
  virtual ~OpCosts() = default;
  // A compute step: `part` of unit `unit` for one micro-batch, forward or backward
  // (recomputation and the TP collectives inside it included).
  virtual StepTimeParts compute(const RankProgram& rank, Part part, std::int32_t unit,
                                bool forward) const = 0;
  // A state move of a pass body: kFetch, kGather, kRelease, kSumNormGrads, kSumKvGrads,
  // kReduceGrads or kOffloadGrads of unit `unit`.
  virtual StepTimeParts state_move(const RankProgram& rank, ProgramOpKind kind,
                                   std::int32_t unit) const = 0;
  // The transfer a send (kSendForward or kSendBackward) of local chunk `chunk` starts. The
  // receive costs nothing of its own: it waits for this.
  virtual StepTimeParts transfer(const RankProgram& rank, ProgramOpKind kind,
                                 std::int32_t chunk) const = 0;
  // A tail op (rank.ops[i], i >= tail_begin).
  virtual StepTimeParts tail(const RankProgram& rank, const ProgramOp& op) const = 0;
};

// ---- a Program priced: what the simulator reads ----

// A body's outputs as max-plus functions of its inputs (pass start, comm free, copy free):
// output k = max_j (input_j + gain[k][j]), -inf where no path leads from input j.
struct BodyResponse {
  static constexpr int kComputeEnd = 0, kCommFree = 1, kCopyFree = 2, kAllEnd = 3;
  std::array<std::array<double, 3>, 4> gain{};
};

struct PricedBody {
  const PassBody* body = nullptr;        // not owned
  std::vector<StepTimeParts> op_times;   // [body op]
  std::vector<double> op_s;              // [body op] totals
  BodyResponse response;                 // streams mode
  double serial_s = 0;                   // serial mode: every op one after the other
  double compute_stream_s = 0;           // its compute-stream ops (a rank's busy time)
};

struct PricedRank {
  const RankProgram* program = nullptr;  // not owned
  SimulationMode mode = SimulationMode::kStreams;  // what it was priced for (responses, tail)
  std::vector<PricedBody> bodies;        // [body]
  // [chunk][0 forward, 1 backward, 2 the last micro-batch's backward]: index into bodies.
  std::vector<std::array<std::int32_t, 3>> body_of;
  // [chunk][0 send_forward, 1 send_backward]: the transfer and its total.
  std::vector<std::array<StepTimeParts, 2>> transfer;
  std::vector<std::array<double, 2>> transfer_s;
  std::vector<StepTimeParts> tail_times;   // [op - tail_begin]
  // The tail replayed alone from 0 on free streams (it starts on free streams: rule 3). Its
  // carried ops (program.h, "carried") run in the next step, from its start: their start and
  // end there, back to back on the host thread.
  std::vector<double> tail_start_s, tail_end_s;
  // A Program that carries host steps: how long the pipeline waits for the last step's, in
  // the steady state: the most any carried unit's update ends after the first use that waits
  // for it (program.h, RankProgram::carried_waits), from the body's start. The pass that
  // holds that use is taken to start with the step (the first forward of pipeline rank 0
  // does; a later one would wait less): the wait shifts the whole pipeline.
  double carry_wait_s = 0;
  // The step after the pipeline: carry_wait_s plus the tail's ops that are not carried.
  double tail_s = 0;
};

// The stream whose lane a body op takes in the streams mode: its own, but the host work of a
// body (the CPU optimizer of a layer, program.h) on the compute lane: a backend that runs it on
// the thread that issues the device's work (CUDA) holds the issue of what follows with it, as
// with a compute op. (The makers give CUDA's Programs none: BackendFacts::
// host_optimizer_in_backward; the streams mode prices one exactly where a Program has it.)
Stream body_stream(const ProgramOp& op);

// Prices every body, send and tail op of `rank`. Throws std::logic_error when the rank's
// bodies are not program.h's (one forward and one or two backward bodies per chunk) or a
// body op is on a stream bodies do not use.
PricedRank price_rank(const RankProgram& rank, const OpCosts& costs, SimulationMode mode);

// Runs one body op by op from (pass start, comm free, copy free); times[i] = {start, end}.
// Streams mode; the serial mode's body is its ops back to back from the pass start.
void expand_body(const PricedBody& body, SimulationMode mode, double start, double comm_free,
                 double copy_free, std::vector<std::array<double, 2>>& times);

// ---- the pipeline part of a Program, without bodies ----

struct PipelineStep {
  ProgramOpKind kind = ProgramOpKind::kForward;  // a pass or a message
  std::int8_t variant = -1;  // passes: 0 forward, 1 backward, 2 the last micro-batch's backward
  std::int32_t micro_batch = 0;
  std::int32_t chunk = 0;
  std::array<std::int32_t, ProgramOp::kMaxAfter> after{-1, -1, -1};
  std::int32_t message = -1;  // messages: the slot a send and its receive share
  bool operator==(const PipelineStep&) const = default;
};

struct PipelineSkeleton {
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  std::int64_t pp = 1, virtual_stages = 1, micro_batches = 1;
  std::vector<std::vector<PipelineStep>> ranks;  // [pp_rank][op], the ops before the tail
  // Every op of every rank in an order where a receive comes after its send and an op after
  // those before it on its rank (found once; the replay is then one pass over it).
  std::vector<std::array<std::int32_t, 2>> order;  // {pp_rank, op}
  // The same ops in the replay's own form: order[g]'s op, its `after` as indices into order.
  struct Replayed {
    std::int32_t rank = 0;
    ProgramOpKind kind = ProgramOpKind::kForward;
    std::int8_t variant = -1;
    std::int32_t chunk = 0;
    std::array<std::int32_t, ProgramOp::kMaxAfter> after{-1, -1, -1};
    std::int32_t message = -1;
    bool operator==(const Replayed&) const = default;
  };
  std::vector<Replayed> replayed;
  std::int32_t messages = 0;
  // [pp_rank][chunk][variant]: how many passes run each body (pipeline_lower_bound).
  std::vector<std::vector<std::array<std::int64_t, 3>>> passes;
  // Every rank's first pass is the forward of (micro-batch 0, chunk 0) and its last the
  // backward of (m - 1, chunk 0): true of every schedule make_schedule generates.
  bool fills_and_drains = false;
  bool operator==(const PipelineSkeleton&) const = default;
};

// The step ops before each rank's tail. Throws InfeasiblePlan when a message has no
// partner or the ranks deadlock (a receive waits on a send that comes after it), and
// std::logic_error when a pass's body is not the one its chunk and micro-batch select.
PipelineSkeleton pipeline_skeleton(const Program& program);
// The same from make_schedule and program.h's pipeline rules (a pass after the receive
// right before it, a send after the pass right before it): equal to the Program's (tested),
// but linear in the schedule where make_program is linear in p times the schedule.
PipelineSkeleton pipeline_skeleton(ScheduleKind kind, std::int64_t pp, std::int64_t v,
                                   std::int64_t m);

// ---- the simulation ----

// One op of a rank's timeline: a step op (body_op = -1), a body op of the pass `op`, or a
// tail op; in list order, each pass followed by its body ops.
struct TimedOp {
  std::int32_t op = 0;
  std::int32_t body_op = -1;
  double start_s = 0;
  double end_s = 0;
};

struct StepSimulation {
  double step_s = 0;            // the last op's end
  double pipeline_s = 0;        // the tail's start: the last pass's end with its body ops
  std::int64_t critical_rank = 0;
  StepTimeParts parts;          // the critical rank's [0, step_s], as above
  std::vector<double> busy_s;   // [pp_rank] its compute-stream time in the pipeline
  std::vector<double> tail_s;   // [pp_rank] its tail's length
};

// Replays the pipeline of `skeleton` with rank r priced by ranks[class_of[r]] (so equal
// ranks are priced once), then each rank's tail. With `timeline`, every op of every rank
// ([pp_rank][...], TimedOp order). Without `with_parts`, parts stay zero (the step time is
// the same: the parts are cut from the timeline afterwards).
StepSimulation simulate_step(const PipelineSkeleton& skeleton, const std::vector<PricedRank>& ranks,
                             const std::vector<std::int32_t>& class_of, SimulationMode mode,
                             std::vector<std::vector<TimedOp>>* timeline = nullptr,
                             bool with_parts = true);

// Buffers a replay reuses between calls (the planner's PredictionCache holds one).
struct ReplayScratch {
  std::vector<double> done, send_start, send_end;
  std::vector<std::array<double, 4>> clocks;
};

// The pipeline part of simulate_step alone: its end (StepSimulation::pipeline_s, the same
// number), with nothing recorded. For the planner, which ranks plans by the step time,
// pipeline_s + the longest tail.
double replay_pipeline(const PipelineSkeleton& skeleton, const std::vector<PricedRank>& ranks,
                       const std::vector<std::int32_t>& class_of, SimulationMode mode,
                       ReplayScratch& scratch);
// A lower bound of replay_pipeline's result, for a planner that skips the replay of a plan
// that cannot rank (a bound above the plans already ranked), computed without a skeleton.
// Every make_schedule pipeline (tests check each skeleton's `passes` and
// `fills_and_drains`) has each rank run the forward and the backward of each micro-batch on
// each of its chunks once, the backward of m - 1 being the last micro-batch's body. So rank
// r computes busy_r (its compute-stream time in streams mode, its passes' serial time in
// serial mode) one pass after the other, and its first pass, the forward of (0, chunk 0),
// waits for that same forward of every rank before it (a receive ends after its send,
// which starts after its pass: each adds at least its compute), while after its last pass,
// the backward of (m - 1, chunk 0), that same backward runs on every rank before it:
//   bound = max over r of  sum_{j<r} F_j + busy_r + sum_{j<r} B_j
// with F_j, B_j rank j's compute in those two passes. Transfers are left out (>= 0). For
// uniform stages and free transfers it is the makespan, (m + p - 1)(f + b) (tested).
double pipeline_lower_bound(std::int64_t micro_batches, const std::vector<PricedRank>& ranks,
                            const std::vector<std::int32_t>& class_of, SimulationMode mode);

// Everything of `ranks` that replay_pipeline reads, as bytes: the same skeleton, class_of
// and key give the same pipeline end (what a cache of replays may be keyed by).
std::string replay_key(const std::vector<PricedRank>& ranks, SimulationMode mode);

struct ProgramTimeline {
  StepSimulation step;
  std::vector<std::vector<TimedOp>> ranks;  // [pp_rank]
};
// A Program priced by `costs`, every rank priced on its own.
ProgramTimeline simulate_program(const Program& program, const OpCosts& costs,
                                 SimulationMode mode);

}  // namespace strata
