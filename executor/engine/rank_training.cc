// Builds one rank's training objects in dependency order (see rank_training.h).
#include "executor/engine/rank_training.h"

namespace strata::engine {
namespace {
ParallelDims dims_of(const Plan& plan) {
  return ParallelDims{static_cast<int>(plan.tp), static_cast<int>(plan.pp),
                      static_cast<int>(plan.dp)};
}
}  // namespace

RankTraining::RankTraining(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                           MpiCommunicator& world, const TierBudgets& budgets,
                           const std::vector<std::uint8_t>& corpus,
                           const OffloadOptions& offload)
    : world_(&world),
      groups_(world, dims_of(plan)),
      alloc_(budgets),
      sampler_(corpus, train.seed, model.seq_len),
      engine_(model, train, plan, groups_, world, alloc_, sampler_, offload) {}

}  // namespace strata::engine
