// Builds one rank's training objects in dependency order (see rank_training.h).
#include "executor/engine/rank_training.h"

#include "executor/comm/communicator_factory.h"

namespace strata::engine {
namespace {
ParallelDims dims_of(const Plan& plan) {
  return ParallelDims{static_cast<int>(plan.tp), static_cast<int>(plan.pp),
                      static_cast<int>(plan.dp)};
}

// The CPU backend's groups: MPI splits of the world (the factory is only needed while the
// groups are made).
ProcessGroups mpi_groups(const MpiCommunicator& world, const ParallelDims& dims) {
  MpiCommunicatorFactory factory(world);
  return ProcessGroups(factory, dims);
}
}  // namespace

RankTraining::RankTraining(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                           MpiCommunicator& world, const TierBudgets& budgets,
                           const std::vector<std::uint8_t>& corpus,
                           const OffloadOptions& offload)
    : world_(&world),
      groups_(mpi_groups(world, dims_of(plan))),
      alloc_(budgets),
      sampler_(corpus, train.seed, model.seq_len),
      engine_(model, train, plan, groups_, world, alloc_, sampler_, offload) {}

}  // namespace strata::engine
