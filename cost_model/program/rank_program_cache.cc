// Rank Programs reused across the planner's candidates (see rank_program_cache.h).
#include "cost_model/program/rank_program_cache.h"

namespace strata {
namespace {

// Everything make_rank_program's result depends on besides the model: program_plan's
// fields, where the host optimizer steps (the train spec's clipping; carried or not), the micro-batch count,
// the rank and the options.
std::vector<std::int64_t> key_of(const Plan& read, bool optimizer_in_backward, bool carried, std::int64_t m,
                                 std::int64_t pp_rank, const ProgramOptions& options) {
  return {read.tp,
          read.pp,
          read.dp,
          read.virtual_stages,
          read.micro_batch,
          static_cast<std::int64_t>(read.schedule),
          read.zero_stage,
          static_cast<std::int64_t>(read.offload.params),
          static_cast<std::int64_t>(read.offload.gradients),
          static_cast<std::int64_t>(read.offload.optimizer),
          static_cast<std::int64_t>(read.recompute),
          read.sequence_parallel ? 1 : 0,
          read.first_stage_layers,
          read.last_stage_layers,
          read.embedding_counts_as_layer ? 1 : 0,
          read.loss_counts_as_layer ? 1 : 0,
          optimizer_in_backward ? 1 : 0,
          carried ? 1 : 0,
          m,
          pp_rank,
          options.prefetch_distance,
          options.recompute_regathers ? 1 : 0,
          options.vocab_row_alignment,
          static_cast<std::int64_t>(options.message_dtype)};
}

}  // namespace

const RankProgram& RankProgramCache::get(const ModelSpec& model, const TrainSpec& train,
                                         const Plan& plan, std::int64_t pp_rank,
                                         const ProgramOptions& options) {
  plan.check_against_model(model, train);  // what make_rank_program checks, hit or miss
  if (!model_ || !(*model_ == model)) {
    programs_.clear();
    model_ = model;
  }
  const Plan read = program_plan(plan, options);
  std::vector<std::int64_t> key = key_of(read, optimizer_in_backward(read, train, options),
                                         host_optimizer_carried(plan, train, options),
                                         plan.micro_batches(train), pp_rank, options);
  if (const auto it = programs_.find(key); it != programs_.end()) {
    ++reused_;
    return it->second;
  }
  if (programs_.size() >= kEntries) programs_.clear();
  ++made_;
  return programs_.emplace(std::move(key), make_rank_program(model, train, plan, pp_rank, options, &pipelines_))
      .first->second;
}

}  // namespace strata
