// Everything one rank needs to train, built in the right order from the specs and the world
// communicator: the accounting allocator (device tier budgeted), the backend (made by a
// BackendMaker: the CPU one here, the CUDA one in executor/cuda), the process groups over
// the backend's communicators, the batch sampler and the engine. Shared by `strata run`
// (both backends) and the tests. It lives above the engine and the backends (executor/run),
// so that the engine includes no backend. Deliberately not here: loading files, launching
// ranks, reports.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/train_spec.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/comm/process_groups.h"
#include "executor/data/batch.h"
#include "executor/engine/backend.h"
#include "executor/engine/engine.h"
#include "executor/memory/accounting_allocator.h"

namespace strata::engine {

// The CPU backend: kernels/cpu, MPI communicators.
BackendMaker cpu_backend_maker();

class RankTraining {
 public:
  // Collective over world (size must be plan.world_size()). The tokens must outlive this.
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

  ProcessGroups& groups() { return groups_; }
  AccountingAllocator& allocator() { return alloc_; }
  Backend& backend() { return *backend_; }
  Engine& engine() { return engine_; }
  MpiCommunicator& world() { return *world_; }

 private:
  MpiCommunicator* world_;
  AccountingAllocator alloc_;
  std::unique_ptr<Backend> backend_;
  ProcessGroups groups_;
  data::BatchSampler sampler_;
  Engine engine_;
};

}  // namespace strata::engine
