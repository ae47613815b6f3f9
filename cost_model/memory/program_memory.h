// The device memory of one rank as strata's executor holds it, walked op by op through the
// rank's Program (program.h): what each op allocates and frees, in the Program's order, so
// the peak is found where it happens instead of at moments guessed beside the schedule.
// memory_model.cc computes the byte sizes (ExecutorMemoryTerms) from the model and the plan
// and reports the walk's peak as the prediction for the executor conventions.
//
// What the executor holds (executor/engine, executor/model), the rules the walk follows:
//   always      the model state (params, persistent gradients, AdamW moments; by ZeRO stage,
//               offload tier and d) and, on the last stage, the step's per-token losses;
//   a forward   tokens (first stage, until the pass's backward) and targets (last stage,
//               until the head); each layer's output and its saved tensors (after the
//               recomputation policy's drop), and its forward's transient (all it saves
//               before the drop, the partial sums: the highest moment of a forward that
//               holds its warm-up's pending sends); the head's saved tensors; its transient
//               working set (logits, their gradient, statistics) at the head;
//   a backward  the gradient flowing down the chunk (a message); each layer's backward
//               transient (its working set plus its saved and recomputed tensors, phase by
//               phase: activation_memory.cc), after which the layer's saved tensors and its
//               input are freed;
//   messages    a receive from another rank allocates one message; a sent message stays
//               live until a receive proves it complete (program.h, "Send completion"),
//               freed right after that receive's message is allocated, or else until the
//               end of the pipeline; with p = 1 a message is the sender's output handed over
//               (neither allocated nor held twice);
//   ZeRO-2/3    a unit's full gradient from its first touch in the step (the head's forward
//               touches the tied wte's) to its reduction; with offloaded gradients the
//               reduced shard until it goes down;
//   ZeRO-3      a gathered unit from gather to release; an offloaded shard from its fetch to
//               the gather that consumes it;
//   the tail    the transients of the optimizer step and of ZeRO-1/2's all-gather;
//   set-up      the highest moment of placing the model state (CUDA: each unit's fp32
//               staging beside the state placed so far), before the first step.
// Deliberately not here: byte sizes (memory_model.cc, activation_memory.cc), host and NVMe
// tiers (they hold no transients the planner budgets).
#pragma once

#include <string>
#include <vector>

#include "cost_model/program/program.h"

namespace strata {

// Bytes of one rank's executor allocations (device tier).
struct ExecutorMemoryTerms {
  double persistent = 0;          // model state held all step (params, grads, moments)
  double losses = 0;              // last stage: the step's losses and their gradient scale
  double message = 0;             // one activation (or its gradient) of this rank's rows
  double tokens = 0;              // one micro-batch's token ids (int32)
  double layer_saved = 0;         // a layer's saved tensors besides its input (after the drop)
  double layer_backward_peak = 0; // a layer's backward: working set + saved + recomputed
  double layer_forward_extra = 0; // a layer's forward: its transients above what it keeps
  double head_backward_working = 0;  // the head's backward transient (CUDA: LayerNorm scratch)
  // Set-up (the model state placed unit by unit, with its transients): the highest moment
  // before the first step, 0 when it cannot exceed the step's start.
  double setup_peak = 0;
  double head_saved = 0;          // the head's saved tensors besides its input
  double head_working = 0;        // the head's forward transient (logits and their gradient)
  double embedding_working = 0;   // the embedding's transient (SP: the full partial sum)
  double optimizer_working = 0;   // the tail's largest transient
  std::vector<double> unit_grads;   // [unit] a full gradient buffer (ZeRO-2/3 transient)
  std::vector<double> unit_shard;   // [unit] a reduced gradient shard (offloaded gradients)
  std::vector<double> unit_gather;  // [unit] a gathered unit (ZeRO-3)
  std::vector<double> unit_fetch;   // [unit] a fetched shard (offloaded ZeRO-3 params)
  bool transient_grads = false;     // ZeRO-2/3: full gradients live only until reduced
  bool offloaded_grads = false;     // reduced shards go down (ZeRO >= 2 + offload)
};

struct ProgramMemoryPeak {
  double peak_bytes = 0;
  std::string peak_at;  // the op at the peak, e.g. "backward mb=3 chunk=0: compute layer5", "set-up"
  double activations_at_peak = 0;     // saved tensors, messages and working sets then
  double step_gradients_at_peak = 0;  // ZeRO-2/3 transient gradient buffers then
};

struct WalkOptions {
  // A pass that starts in the state a recorded walk of its body started in is applied as
  // that walk's sums, when every term is a whole number of bytes (exact in a double): the
  // same peak, to the bit, for a step op per pass instead of a body's ops per pass. False
  // walks every op (tests compare the two).
  bool reuse_passes = true;
  // The walk of a Program cut short (steady_cut.h): the moments of pass `shift_from_pass`
  // on (0-based, in list order, with its receive) are named with micro-batch + shift.
  std::int64_t micro_batch_shift = 0;
  std::int64_t shift_from_pass = -1;
};

// Throws std::invalid_argument when the per-unit vectors do not match rank.units.
ProgramMemoryPeak walk_program_memory(const RankProgram& rank, const ExecutorMemoryTerms& terms,
                                      const WalkOptions& options = {});

}  // namespace strata
