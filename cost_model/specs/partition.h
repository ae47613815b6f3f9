// How a Plan cuts the model over ranks: the one place for each of these decisions, used by
// Plan::check, the planner's generators, the memory and time models, the Program generator
// and the executor alike.
//   - the divisibility rules of tensor, sequence and pipeline parallelism (a rule broken is
//     a sentence naming the numbers; empty when the rule holds);
//   - the chunk a layer belongs to: chunk c of pipeline rank r is virtual stage c p + r
//     (Megatron's interleaved assignment), holding layers [s L/(p v), (s+1) L/(p v));
//     virtual stage 0 also runs the embedding, the last one the head; with uneven stages
//     the first and last virtual stage hold the plan's counts and the others share the rest
//     (with v = 1 these are the first and last pipeline stage);
//   - the parameter units a pipeline rank holds and in which order (the embedding, its
//     layers chunk by chunk, the tied wte copy of the last stage when p > 1 or the untied
//     output layer, the final norm), each with its layout (cost_model/specs/param_layout.h).
//   - the rank order of t x p x d ranks (Megatron's): tensor-parallel rank fastest, then
//     data-parallel, then pipeline: world_rank = pp_rank (t d) + dp_rank t + tp_rank.
// Deliberately not here: the communicators of each group (executor/comm/process_groups.h),
// parameter counts (param_layout.h), the schedule (schedule.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/param_layout.h"
#include "cost_model/specs/plan.h"

namespace strata {

// Tensor parallelism splits whole heads, the hidden width and the MLP evenly: t divides
// heads, hidden and ffn_hidden; KV heads split too (kv_heads % t == 0) or, past kv_heads,
// are replicated (t % kv_heads == 0). The one place for these rules.
std::string tensor_parallel_violation(const ModelSpec& model, std::int64_t tp);
// Sequence parallelism splits each sequence's tokens over the t ranks: t > 1 and
// seq_len % t == 0 (then every micro-batch's B * T token rows split evenly too).
std::string sequence_parallel_violation(const ModelSpec& model, std::int64_t tp);
// Whether a layer of `tp` ranks runs sequence-parallel: asked for, and over more than one
// rank (a plan cannot ask for it with t = 1; the layer functions that take any t say so
// here, the one place).
inline bool sequence_parallel_on(bool requested, std::int64_t tp) { return requested && tp > 1; }
// The interleaved schedule runs its micro-batches in groups of p (Megatron's): m % p == 0.
std::string interleaved_violation(std::int64_t pp, std::int64_t micro_batches);
// Every model chunk holds the same number of layers: layers % (p v) == 0.
std::string pipeline_violation(const ModelSpec& model, std::int64_t pp, std::int64_t v);
// The plan's split: even as above, or uneven stages (Plan::first_stage_layers,
// last_stage_layers) with p >= 2 and any v: the first virtual stage (chunk 0 of pipeline rank
// 0, which also runs the embedding) and the last one (the last chunk of rank p - 1, which
// also runs the output layer and the loss) hold the plan's counts, and the other virtual
// stages share the remaining layers evenly, at least one each (p v = 2 with both counts set:
// they must add up to the layers). This is Llama 3's recipe (126 layers on 16 stages, the
// first and last one layer short) and Megatron-Core's embedding and loss counted as a
// layer's worth of work in the split; with v = 1 it is Megatron's first/last pipeline stage
// layer counts.
std::string pipeline_violation(const ModelSpec& model, const Plan& plan);

struct ParallelDims {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  // TP ranks that hold the same KV heads (layer_tensors.h: kv_head_copies; 1 unless KV heads
  // are replicated over TP): consecutive TP ranks, a process group of their own.
  int kv_copies = 1;
  int world_size() const { return tp * pp * dp; }
};

struct RankCoords {
  int tp = 0;
  int dp = 0;
  int pp = 0;
  bool operator==(const RankCoords&) const = default;
};

// Megatron's rank order (above). Throw InfeasiblePlan if a degree is < 1 or the rank is outside 0..t*p*d-1.
RankCoords rank_coords(int world_rank, const ParallelDims& dims);
int world_rank_of(const RankCoords& coords, const ParallelDims& dims);

// The degrees of a plan (kv_copies 1), and with the model's KV-head copies.
ParallelDims parallel_dims(const Plan& plan);
ParallelDims parallel_dims(const Plan& plan, const ModelSpec& model);

inline std::int64_t virtual_stage_of(std::int64_t pp, std::int64_t pp_rank, std::int64_t chunk) {
  return chunk * pp + pp_rank;
}

// One model chunk of a pipeline rank.
struct ChunkLayers {
  std::int64_t vstage = 0;
  std::int64_t first_layer = 0;
  std::int64_t layers = 0;
  bool first = false;  // virtual stage 0: runs the embedding
  bool last = false;   // the last virtual stage: runs the head
};
// Throws InfeasiblePlan when pipeline_violation(model, plan) is not empty or the rank/chunk
// is outside the plan.
ChunkLayers chunk_layers(const ModelSpec& model, const Plan& plan, std::int64_t pp_rank,
                         std::int64_t chunk);

// The units of pipeline rank `pp_rank` on TP rank `tp_rank`, in the order above. A unit's
// `layer` is its transformer layer, -1 otherwise; the chunk that uses a unit is
// unit_chunk() below. wte shards are padded to vocab_row_alignment rows.
// UnitSegments::kOmitted leaves every unit's `segments` empty (names, kinds, layers and
// counts as with them): what a Program reads of its units, made for every rank the planner
// walks, where copying each layer's segments was a tenth of a plan search.
enum class UnitSegments { kIncluded, kOmitted };
std::vector<UnitLayout> rank_unit_layouts(const ModelSpec& model, const Plan& plan,
                                          std::int64_t pp_rank, std::int64_t tp_rank,
                                          std::int64_t vocab_row_alignment = 1,
                                          UnitSegments segments = UnitSegments::kIncluded);

// The wte shard's row alignment a backend trains with (backend_facts.h).
std::int64_t vocab_row_alignment(Backend backend);
// The local chunk whose passes use the unit: a layer's own chunk, chunk 0 for the embedding
// on rank 0, the last chunk for the tied copy and the final LayerNorm on rank p - 1.
std::int64_t unit_chunk(const ModelSpec& model, const Plan& plan, std::int64_t pp_rank,
                        const UnitLayout& unit);

}  // namespace strata
