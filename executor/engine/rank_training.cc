// Builds one rank's training objects in dependency order (see rank_training.h).
#include "executor/engine/rank_training.h"

#include "executor/cpu/cpu_backend.h"

namespace strata::engine {
BackendMaker cpu_backend_maker() {
  return [](AccountingAllocator& alloc, const MpiCommunicator& world) -> std::unique_ptr<Backend> {
    return std::make_unique<cpu_backend::CpuBackend>(alloc, world);
  };
}

RankTraining::RankTraining(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                           MpiCommunicator& world, const TierBudgets& budgets,
                           const std::vector<std::uint8_t>& corpus,
                           const OffloadOptions& offload, const BackendMaker& make_backend)
    : world_(&world),
      alloc_(budgets),
      backend_(make_backend(alloc_, world)),
      groups_(backend_->communicators(), parallel_dims(plan)),
      sampler_(corpus, train.seed, model.seq_len),
      engine_(*backend_, model, train, plan, groups_, world, sampler_, offload) {}

}  // namespace strata::engine
