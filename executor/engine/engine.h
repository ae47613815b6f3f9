// The training engine of one rank: builds this rank's share of the GPT model (its pipeline
// chunks, its TP shard, its ZeRO partition), then runs steps by replaying the cost model's
// schedule for its pipeline rank (make_schedule(plan.schedule, p, v, m).ops[pp_rank]) exactly
// in order: forward / backward of (micro-batch, chunk) with activations saved per (micro-batch,
// chunk), sends posted non-blocking (completed at the end of the step), receives blocking.
// The loss is the mean over every token of the global batch (each token's loss gradient is
// 1 / tokens of the global batch), reported on every rank.
//
// Chunks: chunk c of pipeline rank r is virtual stage s = c p + r, layers
// [s L/(p v), (s+1) L/(p v)); stage 0 also runs the embedding, stage p v - 1 the head.
// Activation recomputation (plan.recompute): each layer's forward drops what the policy does
// not keep (model::drop_activations) and its backward rebuilds it first. Sequence parallel
// (plan.sequence_parallel): activations, pipeline messages and the layer inputs hold this TP
// rank's token rows (model::Dims::rows()); the LayerNorm gradients are summed over TP at
// the end of the schedule.
// Offload (plan.offload): the model state places and moves the tensors (model_state.h); the
// engine prefetches offloaded layer parameters prefetch_depth layers ahead in each pass and
// tells the state when a layer's backward is done (its offloaded gradient goes down then).
// Deliberately not here: overlap of DP communication with backward,
// printing or files (the report module and `strata run` do those).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cost_model/chrome_trace.h"
#include "cost_model/model_spec.h"
#include "cost_model/plan.h"
#include "cost_model/schedule.h"
#include "cost_model/step_report.h"
#include "cost_model/train_spec.h"
#include "executor/comm/process_groups.h"
#include "executor/data/batch.h"
#include "executor/engine/model_state.h"
#include "executor/memory/accounting_allocator.h"
#include "executor/model/gpt_head.h"
#include "executor/model/gpt_layer.h"
#include "executor/model/tp_context.h"

namespace strata::engine {

struct StepResult {
  double loss = 0;        // mean over the global batch's tokens (same on every rank)
  double grad_norm = 0;   // global gradient norm before clipping
  double step_s = 0;      // this rank's wall time for the step
  StepTimeParts parts;    // this rank's split of step_s (see engine.cc for each part)
  std::vector<TraceEvent> events;  // this rank's ops, start_s relative to the step's start
  TransferBytes transfers;         // offload plans: bytes per link in this step
};

// The parameter units (layouts) pipeline rank coords.pp holds, in a fixed order: the
// embedding (if it runs virtual stage 0), its layers in order, the tied wte copy (if it runs
// the last stage and p > 1), the final LayerNorm (last stage).
std::vector<UnitLayout> rank_layouts(const ModelSpec& model, const Plan& plan,
                                            const RankCoords& coords);

class Engine {
 public:
  // Collective over the world (all ranks construct it together). The plan must have passed
  // Plan::check_against_model; groups, world, alloc and sampler must outlive the engine.
  Engine(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
         const ProcessGroups& groups, Communicator& world, AccountingAllocator& alloc,
         const data::BatchSampler& sampler, const OffloadOptions& offload_options = {});

  // Step `step` (0-based: the data of step k, AdamW's step k + 1). Collective.
  StepResult step(std::int64_t step);

  // Only the schedule (forwards and backwards) of step `step`, leaving this rank's
  // unreduced gradients in state() and skipping the optimizer: for gradient checks.
  // Returns the mean loss over the global batch. Collective.
  double forward_backward(std::int64_t step);

  ModelState& state() { return state_; }
  const Schedule& schedule() const { return schedule_; }

 private:
  struct ChunkInfo {
    std::int64_t vstage = 0;
    std::int64_t first_layer = 0;
    std::int64_t layers = 0;
    bool first = false;  // virtual stage 0: runs the embedding
    bool last = false;   // last virtual stage: runs the head
  };
  struct Saved {  // what forward of (micro-batch, chunk) keeps for its backward
    std::vector<Buffer> inputs;  // inputs[i] = input of the chunk's layer i (+ lnf_in on the last)
    std::vector<model::LayerActivations> acts;
    model::HeadActivations head;
    std::vector<std::int32_t> tokens;  // first stage: for the embedding's backward
  };
  struct PendingSend {
    Buffer buffer;
    Request request;
  };
  using Key = std::pair<std::int64_t, std::int64_t>;  // (micro-batch, chunk)

  void run_schedule(std::int64_t step, StepResult& result,
                    std::chrono::steady_clock::time_point origin);
  double global_loss();
  void forward(std::int64_t step, std::int64_t mb, std::int64_t chunk);
  void backward(std::int64_t mb, std::int64_t chunk);
  void sum_sequence_parallel_grads();
  int tag(std::int64_t mb, std::int64_t receiver_vstage, int direction) const;
  std::string layer_unit(std::int64_t layer) const { return "layer" + std::to_string(layer); }
  std::string wte_unit() const;

  ModelSpec model_;
  TrainSpec train_;
  Plan plan_;
  const ProcessGroups* groups_;
  Communicator* world_;
  AccountingAllocator* alloc_;
  const data::BatchSampler* sampler_;
  model::Dims dims_;
  model::TpContext tp_;
  Schedule schedule_;
  std::vector<ChunkInfo> chunks_;
  ModelState state_;
  float loss_scale_ = 0;
  double global_tokens_ = 1;
  double loss_sum_ = 0;
  std::map<Key, Saved> saved_;
  std::map<Key, Buffer> received_forward_, received_backward_, to_send_forward_, to_send_backward_;
  std::vector<PendingSend> sends_;
};

}  // namespace strata::engine
