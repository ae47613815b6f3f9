// Builds one rank's training objects in dependency order (see rank_training.h).
#include "executor/run/rank_training.h"

#include "executor/cpu/cpu_backend.h"

namespace strata::engine {
namespace {
// The CPU backend with the MPI factory it bootstraps its groups from.
class MpiCpuBackend final : public cpu_backend::CpuBackend {
 public:
  MpiCpuBackend(AccountingAllocator& alloc, std::unique_ptr<MpiCommunicatorFactory> comms)
      : CpuBackend(alloc, *comms), comms_(std::move(comms)) {}

 private:
  std::unique_ptr<MpiCommunicatorFactory> comms_;
};
}  // namespace

BackendMaker cpu_backend_maker() {
  return [](AccountingAllocator& alloc, const MpiCommunicator& world) -> std::unique_ptr<Backend> {
    return std::make_unique<MpiCpuBackend>(alloc, std::make_unique<MpiCommunicatorFactory>(world));
  };
}

RankTraining::RankTraining(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                           MpiCommunicator& world, const TierBudgets& budgets,
                           data::TokenView tokens, const OffloadOptions& offload,
                           const BackendMaker& make_backend, const model::UnitInit& init,
                           const HostArenaOptions& arena)
    : world_(&world),
      alloc_(budgets, arena),
      backend_(make_backend(alloc_, world)),
      groups_(backend_->communicators(), parallel_dims(plan, model)),
      sampler_(tokens, train.seed, model.seq_len),
      engine_(*backend_, model, train, plan, groups_, world, sampler_, offload, init) {}

}  // namespace strata::engine
