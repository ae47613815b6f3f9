// Everything one rank needs to train, built in the right order from the specs and the job's
// host communicators: the accounting allocator (device tier budgeted), the backend (made by a
// BackendMaker: cpu_backend.h, cuda_semantics_backend.h, cuda_backend.h), the process groups
// over the backend's communicators, the batch sampler and the engine. The one builder of a
// rank for `strata run` (ranks are processes, over MPI), `strata select` (ranks are threads of
// one process, over a LocalWorld) and the tests; rank_loop.h trains it. It lives above the
// engine and the backends (executor/run), so that the engine includes no backend.
// Deliberately not here: loading files, launching ranks, reports.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/train_spec.h"
#include "executor/comm/communicator.h"
#include "executor/comm/communicator_factory.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/comm/process_groups.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/data/batch.h"
#include "executor/engine/backend.h"
#include "executor/engine/engine.h"
#include "executor/memory/accounting_allocator.h"

namespace strata::engine {

using cpu_backend::cpu_backend_maker;

class RankTraining {
 public:
  // A rank that is a process (strata run, the MPI tests). Collective over world (size must be
  // plan.world_size()); its GPU is the launcher's local rank. The tokens must outlive this.
  // init: each unit's initial values (empty: drawn from train.seed; weights_io.h loads a
  // safetensors file instead). arena: the allocator's block reuse (host_arena.h; tests turn
  // it off or poison uninitialised memory).
  RankTraining(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
               MpiCommunicator& world, const TierBudgets& budgets, data::TokenView tokens,
               const OffloadOptions& offload = {},
               const BackendMaker& make_backend = cpu_backend_maker(),
               const model::UnitInit& init = {}, const HostArenaOptions& arena = {});
  RankTraining(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
               MpiCommunicator& world, const TierBudgets& budgets,
               const std::vector<std::uint8_t>& corpus, const OffloadOptions& offload = {},
               const BackendMaker& make_backend = cpu_backend_maker())
      : RankTraining(model, train, plan, world, budgets, data::TokenView::of_bytes(corpus),
                     offload, make_backend) {}
  // A rank that is a thread of one process (strata select): collective over the threads
  // that hold host's world, one of them on each of the job's ranks; its GPU is `device`.
  RankTraining(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
               std::unique_ptr<CommunicatorFactory> host, int device, const TierBudgets& budgets,
               data::TokenView tokens, const BackendMaker& make_backend = cpu_backend_maker());
  // The members are destroyed in the reverse of their building (each refers to those before
  // it): the engine lets go of the model state first, the host communicators go last.

  const ModelSpec& model() const { return *model_; }
  const TrainSpec& train() const { return *train_; }
  ProcessGroups& groups() { return groups_; }
  AccountingAllocator& allocator() { return alloc_; }
  Backend& backend() { return *backend_; }
  Engine& engine() { return engine_; }
  // The job's world over host memory: the step's scalars, reports, checkpoints.
  Communicator& host_world() { return *host_world_; }

 private:
  struct Comms;  // the host groups and where the rank runs
  RankTraining(const ModelSpec& model, const TrainSpec& train, const Plan& plan, Comms comms,
               const TierBudgets& budgets, data::TokenView tokens, const OffloadOptions& offload,
               const BackendMaker& make_backend, const model::UnitInit& init,
               const HostArenaOptions& arena);

  const ModelSpec* model_;
  const TrainSpec* train_;
  std::unique_ptr<CommunicatorFactory> host_;
  std::unique_ptr<Communicator> owned_host_world_;  // a thread rank's (a process's is MPI's)
  Communicator* host_world_;
  AccountingAllocator alloc_;
  std::unique_ptr<Backend> backend_;
  ProcessGroups groups_;
  data::BatchSampler sampler_;
  Engine engine_;
};

}  // namespace strata::engine
