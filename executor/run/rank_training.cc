// Builds one rank's training objects in dependency order (see rank_training.h).
#include "executor/run/rank_training.h"

#include <utility>

#include "executor/runtime/mpi_launch.h"

namespace strata::engine {

struct RankTraining::Comms {
  std::unique_ptr<CommunicatorFactory> host;
  std::unique_ptr<Communicator> owned_world;
  Communicator* world = nullptr;
  RankPlace place;
};

RankTraining::RankTraining(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                           MpiCommunicator& world, const TierBudgets& budgets,
                           data::TokenView tokens, const OffloadOptions& offload,
                           const BackendMaker& make_backend, const model::UnitInit& init,
                           const HostArenaOptions& arena)
    : RankTraining(model, train, plan,
                   [&] {
                     Comms c;
                     c.host = std::make_unique<MpiCommunicatorFactory>(world);
                     c.world = &world;
                     // mpirun's, srun's or a PMI launcher's local rank (mpi_launch.h).
                     c.place.device = detect_launch_env().local_rank;
                     return c;
                   }(),
                   budgets, tokens, offload, make_backend, init, arena) {}

RankTraining::RankTraining(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                           std::unique_ptr<CommunicatorFactory> host, int device,
                           const TierBudgets& budgets, data::TokenView tokens,
                           const BackendMaker& make_backend)
    : RankTraining(model, train, plan,
                   [&] {
                     Comms c;
                     // The host world is a group of its own, not the backend's world group:
                     // on CUDA those take device buffers, and the step's scalars are host's.
                     c.owned_world = host->split(GroupKind::kWorld, 0, host->world_rank());
                     c.world = c.owned_world.get();
                     c.host = std::move(host);
                     c.place.device = device;
                     c.place.ranks_are_threads = true;
                     return c;
                   }(),
                   budgets, tokens, {}, make_backend, {}, {}) {}

RankTraining::RankTraining(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                           Comms comms, const TierBudgets& budgets, data::TokenView tokens,
                           const OffloadOptions& offload, const BackendMaker& make_backend,
                           const model::UnitInit& init, const HostArenaOptions& arena)
    : model_(&model),
      train_(&train),
      host_(std::move(comms.host)),
      owned_host_world_(std::move(comms.owned_world)),
      host_world_(comms.world),
      alloc_(budgets, arena),
      backend_(make_backend(alloc_, [&] {
        RankPlace place = comms.place;
        place.host = host_.get();
        return place;
      }())),
      groups_(backend_->communicators(), parallel_dims(plan, model)),
      sampler_(tokens, train.seed, model.seq_len),
      engine_(*backend_, model, train, plan, groups_, *host_world_, sampler_, offload, init) {}

}  // namespace strata::engine
