// The one training engine: replays this rank's Program (cost_model/program/program.h) op for op
// through a Backend (backend.h), on the CPU and on CUDA alike. It builds this rank's share
// of the GPT model (its chunks, its TP shard, its ZeRO partition: ModelState) and makes no
// scheduling decision of its own: the passes, messages, gathers, fetches, reductions,
// offloads and optimizer steps happen where the Program puts them, each on its stream,
// after the ops its `after` names.
//
// Passes: forward / backward of (micro-batch, chunk) with activations saved per (micro-
// batch, chunk); sends posted non-blocking, each completed and freed at the receive that
// the Program says proves it complete (program.h, "Send completion"), the rest at the end of
// the pipeline; receives blocking their stream. The loss is the mean over every token of the global batch (each
// token's loss gradient is 1 / tokens of the global batch), reported on every rank.
// Activation recomputation (plan.recompute): each layer's forward drops what the policy does
// not keep (model::drop_activations) and its backward rebuilds it first. Sequence parallel:
// activations, pipeline messages and the layer inputs hold this TP rank's token rows.
//
// Every op is timed on its stream (Backend timestamps) and becomes one trace event with the
// Program's op name, in Program order: a pass's event, then its body's ops.
//
// Captured steps (CUDA graphs: `strata run --cuda-graphs`, where the backend captures_steps and
// why_steps_not_captured is empty): a step's ops are issued once into a graph and each later
// step replays it, one launch instead of thousands. The step's TP collectives are then not
// timed apart (the report counts them in the passes). A graph runs what was issued with the
// arguments it was issued with, so a captured step makes no host round trip and takes every
// value that changes from step to step from memory it reads when it runs: the tokens from
// pinned buffers the host fills before each launch (stage_inputs), the learning rate, AdamW's
// step and the clip factor from DeviceStepScalars (the norm summed and the clip factor taken
// on the device), the loss and the norm read after the step. Its scratch comes from the pool
// at fixed addresses: a replay checks that every block free after the capture still is
// (Backend::free_blocks) and captures afresh where one is not. The first step runs these ops eagerly (the pool
// and the libraries' plans warm), the second is captured and launched, the rest replay; each
// reports the ops' times from the captured events.
// Deliberately not here: printing or files (the report module and `strata run` do those),
// launching ranks, the data format.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cost_model/program/chrome_trace.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/partition.h"
#include "cost_model/specs/plan.h"
#include "cost_model/program/program.h"
#include "cost_model/specs/step_report.h"
#include "cost_model/specs/train_spec.h"
#include "executor/comm/process_groups.h"
#include "executor/data/batch.h"
#include "executor/engine/backend.h"
#include "executor/engine/model_state.h"
#include "executor/model/gpt_head.h"
#include "executor/model/gpt_layer.h"
#include "executor/model/tp_context.h"

namespace strata::engine {

struct StepResult {
  double loss = 0;        // mean over the global batch's tokens (same on every rank)
  double grad_norm = 0;   // global gradient norm before clipping
  double lr = 0;          // the learning rate of this step's update (optimizer_schedule.h)
  double step_s = 0;      // this rank's wall time for the step
  StepTimeParts parts;    // this rank's split of step_s (see engine.cc for each part)
  std::vector<TraceEvent> events;  // this rank's ops in Program order, start_s from the step's start
  TransferBytes transfers;         // offload plans: bytes per link in this step
};

// Why `plan`'s steps cannot be captured as a graph (empty when they can): no pipeline (its
// messages' requests are host objects), all model state on the device (no host work), and
// with several ranks, collectives that run on the device (collectives_on_device: NCCL's).
std::string why_steps_not_captured(const Plan& plan, bool collectives_on_device);

class Engine {
 public:
  // Collective over the world (all ranks construct it together). The plan must have passed
  // Plan::check_against_model; backend, groups, host_world and sampler must outlive the
  // engine. host_world: the world over host memory (MPI), for the step's scalars (loss,
  // gradient norm) and its starting barrier, whatever the backend's device communicators.
  Engine(Backend& backend, const ModelSpec& model, const TrainSpec& train, const Plan& plan,
         const ProcessGroups& groups, Communicator& host_world, const data::BatchSampler& sampler,
         const OffloadOptions& offload_options = {}, const model::UnitInit& init = {});
  // Waits for the host work still queued (it touches the model state).
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Step `step` (0-based: the data of step k, AdamW's step k + 1). Collective.
  StepResult step(std::int64_t step);

  // Only the pipeline part of step `step` (no tail: no tied sum, norm or optimizer), for
  // gradient checks at d = 1. Returns the mean loss over the global batch. Collective.
  double forward_backward(std::int64_t step);

  // The mean loss over batch `batch` of another sampler (the validation stream), with the
  // current weights. It runs the Program's passes without the tail, so every plan evaluates
  // through the ops it trains with (forward and backward: a forward-only Program is not
  // written yet); gradients are computed and dropped, the weights and optimizer state stay
  // as they are. Collective.
  double evaluate(const data::BatchSampler& sampler, std::int64_t batch);

  // The model state, with the host steps carried from the last step (program.h, "carried")
  // done first: what a checkpoint, a test or a select slice reads is the stepped state.
  ModelState& state();
  const RankProgram& program() const { return program_; }
  // Whether this rank carries its tail's host steps into the next step (program.h, "carried"):
  // the Program does and the backend runs them apart. A step's trace then has the last
  // step's carried ops (args "carried": true) in place of its own; the first step's none.
  bool carries_host_steps() const { return carrying_; }
  // Whether steps are captured and replayed (the top of this file), and when the backend
  // would capture but the plan does not allow it, why not (else empty).
  bool captures_steps() const { return capture_ != nullptr; }
  const std::string& why_not_captured() const { return why_not_captured_; }
  // Captures made after the first because other work (an evaluation that kept a block) held
  // a block the graph uses as scratch when a replay was due.
  int recaptures() const { return capture_ == nullptr ? 0 : capture_->recaptures; }

 private:
  struct Saved {  // what the forward of (micro-batch, chunk) keeps for its backward
    std::vector<Tensor> inputs;  // inputs[i] = input of the chunk's layer i (+ lnf_in on the last)
    std::vector<model::LayerActivations> acts;
    model::HeadActivations head;
    Tensor tokens;               // first stage: the embedding's backward reads them
  };
  struct PendingSend {
    Tensor buffer;
    Request request;
  };
  // One timed op of the step, resolved to durations after the step's synchronisation.
  struct OpRecord {
    ProgramOpKind kind = ProgramOpKind::kForward;
    Stream stream = Stream::kCompute;
    int start = -1, end = -1;  // Backend timestamps
    std::int32_t micro_batch = -1, chunk = -1;
    std::int32_t op = -1, body_op = -1;  // its place in the Program (the trace's args)
    std::int32_t fused_into = -1;        // run in the call of that op, which carries the time
    std::string unit;
    bool in_pass = false;
    double tp_s = 0;           // TP collectives inside (host-timed)
    // Passes: each wait for the last step's carried host steps, as timestamps on the stream
    // that waited, right before and after the wait (the CPU backend: the issuing thread
    // blocked; CUDA: the stream stalled).
    std::vector<std::array<int, 2>> carried_waits;
  };
  // What waiting for an op means: a mark on each stream it touched.
  using Marks = std::vector<std::pair<Stream, int>>;
  using MarkList = std::vector<Marks>;
  // A carried host step's run on the host thread, for the trace of the step it ran in.
  struct HostSpan {
    std::chrono::steady_clock::time_point start, end;  // written before `done`
    std::atomic<bool> done{false};
  };
  struct CarriedStep {
    std::int32_t op = -1;  // its place in the Program
    std::string unit;
    std::shared_ptr<HostSpan> span;
    Marks done;            // waiting for it; empty once waited for
  };
  using Key = std::pair<std::int64_t, std::int64_t>;  // (micro-batch, chunk)
  // Captured steps' state (the top of this file).
  struct Capture {
    Tensor scalars;         // device: DeviceStepScalars
    Tensor scalars_staged;  // pinned host: the host-written part, copied up by the graph
    // pinned host: a pass's tokens, [0] its inputs, [1] its targets (first / last chunk)
    std::map<Key, std::array<Tensor, 2>> tokens;
    bool warm = false;      // one step has run these ops (the pool holds their blocks)
    bool captured = false;  // the backend holds the graph
    std::vector<FreeBlock> free_blocks;  // the pool's free blocks after the capture
    std::vector<OpRecord> records;  // the captured step's, whose timestamps each launch writes
    int origin = -1;
    int recaptures = 0;
  };

  void begin_step();
  // The step's ops after begin_step: the pipeline (optimizer steps in it run), the sends'
  // completion, the tail.
  void run_ops(std::int64_t step, std::vector<OpRecord>& records);
  StepResult captured_step(std::int64_t step);
  // The host-written inputs of a captured step: every pass's tokens and the step scalars.
  void stage_inputs(std::int64_t step, double lr);
  // A captured step's device tokens: copied from the staged pinned buffer (`which`: 0 inputs,
  // 1 targets) on the compute stream.
  Tensor staged_device_tokens(const Key& key, int which);
  // The step's durations, trace events and split (engine.cc's top) from its records.
  void account(const std::vector<OpRecord>& records, int origin, std::int64_t pp_rank,
               StepResult& result);
  void run_pipeline(std::int64_t step, std::vector<OpRecord>& records);
  void finish_sends(std::vector<OpRecord>& records);
  void run_tail(std::int64_t step, std::vector<OpRecord>& records);
  // How many tail ops from op i on are optimizer steps on the compute stream after the same
  // ops, which run_tail issues as one call (1: op i alone).
  std::size_t fused_optimizer_steps(std::size_t i) const;
  // Issues one op on its stream after `floor` and the ops its `after` names (in `done`),
  // runs it and times it; returns what waiting for it means.
  Marks issue(const ProgramOp& op, const MarkList& done, const Marks& floor,
              std::vector<OpRecord>& records, bool in_pass, std::int32_t mb, std::int32_t chunk,
              const std::function<void()>& run, bool timed = true);
  // Issues the carried host step at step op i (`local`: it with the tail's own `after`;
  // program.h, "carried"); returns what waiting for it means.
  Marks issue_carried(const ProgramOp& local, std::size_t i, std::int64_t step, const MarkList& done,
                      const Marks& floor, std::vector<OpRecord>& records);
  // Makes `stream` wait for the last step's carried steps that body op `body_op` of step op
  // `op` waits for; adds the wait's timestamps to `pass` (none when nothing waits there).
  void wait_for_carried(std::int32_t op, std::int32_t body_op, Stream stream, OpRecord& pass);
  // The last step's carried steps' trace events (carried_in_), from `step_start` on.
  void trace_carried(std::chrono::steady_clock::time_point step_start, std::int64_t pp_rank,
                     std::vector<TraceEvent>& events) const;
  // Waits for every carried step still running (evaluation, gradient checks, state()).
  void finish_carried();
  void begin_pass(const ProgramOp& pass, std::int64_t step);
  void end_pass(const ProgramOp& pass);
  void compute(const ProgramOp& op, bool forward, std::int64_t step, std::int64_t mb,
               std::int64_t chunk);
  void state_move(const ProgramOp& op, std::int64_t step, StepResult& result);
  // The stream an op's marks and timestamps are taken on: its own, but a host-stream op on
  // the compute stream where its work runs on this thread (!host_apart_).
  Stream issue_stream(const ProgramOp& op) const;
  void message(const ProgramOp& op);
  void complete_sends(const ProgramOp& recv);
  Tensor device_tokens(const std::vector<std::int32_t>& host, const char* tag);
  int tag(std::int64_t mb, std::int64_t receiver_vstage, int direction) const;
  double global_loss();
  // The output layer the head multiplies by: the untied "output" unit's lm_head, else the
  // token embedding's wte (the first stage's, or the last stage's copy).
  struct OutputLayer {
    std::size_t unit;
    const char* segment;
  };
  OutputLayer output_layer() const;

  Backend* backend_;
  ModelSpec model_;
  TrainSpec train_;
  Plan plan_;
  const ProcessGroups* groups_;
  Communicator* host_world_;
  const data::BatchSampler* sampler_;
  model::Dims dims_;
  model::TpContext tp_;
  RankProgram program_;
  ModelState state_;
  std::vector<ChunkLayers> chunks_;
  Tensor dlosses_;                 // last stage: (BT) 1 / tokens of the global batch
  Tensor losses_;                  // last stage: (m, BT) this step's per-token losses
  std::map<Key, Tensor> targets_;  // last stage: the targets of a pass, until its head runs
  double global_tokens_ = 1;
  std::map<Key, Saved> saved_;
  std::map<Key, Tensor> received_forward_, received_backward_, to_send_forward_, to_send_backward_;
  std::map<Key, Tensor> handed_forward_, handed_backward_;  // p = 1: messages to this rank
  // [0] forward, [1] backward: sends posted and not yet completed, oldest first, and how many
  // of the step's sends of that direction were completed before them.
  std::array<std::deque<PendingSend>, 2> sends_;
  std::array<std::int32_t, 2> sends_completed_{0, 0};
  Tensor pass_grad_;               // backward pass: the gradient flowing down the chunk
  StepResult* result_ = nullptr;   // the step being run
  // Host-stream ops run on the backend's host stream, beside this thread: where the backend
  // has one for this rank (host_stream_apart) and no tier is NVMe (the store's one io_uring engine, which this thread's
  // parameter prefetches keep busy across ops, is not to be shared).
  bool host_apart_ = false;
  // The tail's carried host steps run past the step's end (program.h, "carried"): the Program
  // carries them and they run apart (host_apart_); else they are waited for in the step.
  bool carrying_ = false;
  // In the Program's carried order: the steps this step's tail carries, and (while a step
  // runs) the last step's, which its pipeline waits for.
  std::vector<CarriedStep> carried_, carried_in_;
  // In step()'s pipeline: the optimizer steps in the backward bodies run (program.h); in
  // forward_backward and evaluate they do not.
  bool stepping_ = false;
  std::unique_ptr<Capture> capture_;  // captured steps; null: every step issued anew
  // In captured_step's ops: the passes' tokens come from the staged buffers (evaluation and
  // gradient checks copy theirs from the host, as ever).
  bool staged_inputs_ = false;
  std::string why_not_captured_;
};

}  // namespace strata::engine
