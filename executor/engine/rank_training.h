// Everything one rank needs to train, built in the right order from the specs and the world
// communicator: process groups, the accounting allocator (device tier = the model's memory
// on the CPU backend, budgeted), the batch sampler and the engine. Shared by `strata run`
// and the tests. Deliberately not here: loading files, launching ranks, reports.
#pragma once

#include <cstdint>
#include <vector>

#include "cost_model/model_spec.h"
#include "cost_model/plan.h"
#include "cost_model/train_spec.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/comm/process_groups.h"
#include "executor/data/batch.h"
#include "executor/engine/engine.h"
#include "executor/memory/accounting_allocator.h"

namespace strata::engine {

class RankTraining {
 public:
  // Collective over world (size must be plan.world_size()). corpus must outlive this.
  RankTraining(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
               MpiCommunicator& world, const TierBudgets& budgets,
               const std::vector<std::uint8_t>& corpus, const OffloadOptions& offload = {});

  ProcessGroups& groups() { return groups_; }
  AccountingAllocator& allocator() { return alloc_; }
  Engine& engine() { return engine_; }
  MpiCommunicator& world() { return *world_; }

 private:
  MpiCommunicator* world_;
  ProcessGroups groups_;
  AccountingAllocator alloc_;
  data::BatchSampler sampler_;
  Engine engine_;
};

}  // namespace strata::engine
