// The pipeline schedule: for each pipeline rank, the ordered list of ops it runs in one
// step. Generated once here; the simulator replays it over a task graph and the executor
// replays the very same lists with real sends and receives.
//
// Model chunks: with p pipeline ranks and v chunks per rank, the model is cut into p*v
// virtual stages of layers/(p*v) layers each; chunk c of pipeline rank r is virtual stage
// c*p + r (Megatron's interleaved assignment), so activations flow rank 0 -> 1 -> ... ->
// p-1 -> 0 (next chunk) -> ... The first virtual stage also owns the embedding, the last
// the final LayerNorm, the logits and the loss.
//
// Ops on a rank run in list order. Sends do not block (the executor posts them
// asynchronously); a receive blocks until the matching send has been posted. With these
// semantics every generated schedule is deadlock-free (tests replay them to check it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/specs/plan.h"

namespace strata {

enum class OpKind {
  kForward,       // forward of (micro_batch, chunk)
  kBackward,      // backward of (micro_batch, chunk), including recompute when planned
  kRecvForward,   // receive the input activation of (micro_batch, chunk) from `peer`
  kSendForward,   // send the output activation of (micro_batch, chunk) to `peer`
  kRecvBackward,  // receive the output gradient of (micro_batch, chunk) from `peer`
  kSendBackward,  // send the input gradient of (micro_batch, chunk) to `peer`
};

struct PipelineOp {
  OpKind kind = OpKind::kForward;
  std::int64_t micro_batch = 0;
  std::int64_t chunk = 0;   // local chunk index 0..v-1
  std::int64_t peer = -1;   // pipeline rank on the other side of a send/receive; -1 otherwise
  bool operator==(const PipelineOp&) const = default;
};

struct Schedule {
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  std::int64_t pp = 1;
  std::int64_t virtual_stages = 1;
  std::int64_t micro_batches = 1;
  std::vector<std::vector<PipelineOp>> ops;  // ops[pp_rank]

  std::int64_t virtual_stage(std::int64_t pp_rank, std::int64_t chunk) const {
    return chunk * pp + pp_rank;
  }
  std::int64_t num_virtual_stages() const { return pp * virtual_stages; }
};

// Throws InfeasiblePlan on: pp < 1, v < 1, m < 1, v > 1 with a non-interleaved schedule,
// interleaved with m % pp != 0. (layers % (p*v) is checked by Plan::check, which knows the model.)
// For interleaved with v == 1 the result is the 1F1B schedule.
Schedule make_schedule(ScheduleKind kind, std::int64_t pp, std::int64_t virtual_stages,
                       std::int64_t micro_batches);
// The forwards pipeline rank r runs before its first backward (the warm-up) in its m * v
// passes: GPipe every one; 1F1B min(p - r - 1, m); interleaved (v > 1)
// min(2 (p - r - 1) + (v - 1) p, m v). The one place the schedules, the steady-phase cut
// (steady_cut.h) and the memory model's choice of ranks (memory_model.h) read it.
std::int64_t warmup_forwards(ScheduleKind kind, std::int64_t pp, std::int64_t virtual_stages,
                             std::int64_t micro_batches, std::int64_t pp_rank);
// make_schedule(...).ops[pp_rank] alone (a Program is made one rank at a time: making every
// rank's list for each made a p-stage Program cost p^2 m ops). Also throws InfeasiblePlan
// when pp_rank is outside 0..pp-1.
std::vector<PipelineOp> make_rank_schedule(ScheduleKind kind, std::int64_t pp,
                                           std::int64_t virtual_stages,
                                           std::int64_t micro_batches, std::int64_t pp_rank);

// Op names shared by the simulator's and the executor's traces: "forward", "backward",
// "recv_forward", "send_forward", "recv_backward", "send_backward".
std::string to_string(OpKind kind);

// The largest number of micro-batches whose forward activations a rank holds at once
// (forwards done minus backwards done, per chunk summed), computed by walking ops[pp_rank].
// Equals m for GPipe, min(p - r, m) for 1F1B on rank r; interleaved rank 0 holds the most.
std::int64_t max_in_flight(const Schedule& schedule, std::int64_t pp_rank);

}  // namespace strata
