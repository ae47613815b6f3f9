// One rank of a plan built and replayed on the CUDA backend without a GPU: the engine over
// the PoolRecorder (executor/cuda/pool_recorder.h), which runs the CUDA backend's allocation
// code and the kernels' shape checks and no arithmetic, with the rank's process groups as
// communicators that carry nothing. What a GPU run constructs -- the model's layers for its
// TP rank, the stage's units, the Program, the offload tiers, the batches -- is constructed
// here the same way, so a model, plan or input that a GPU run would refuse is refused here,
// on any machine. Used by the CUDA harnesses' construction checks (the equivalence driver's
// --check, the engine test's plan checks) and by the pool's memory prediction test.
// Deliberately not here: the values (no initialisation: nothing reads them).
#pragma once

#include <cstdint>
#include <vector>

#include "cost_model/specs/partition.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/train_spec.h"
#include "executor/comm/process_groups.h"
#include "executor/cuda/pool_recorder.h"
#include "executor/data/batch.h"
#include "executor/data/corpus.h"
#include "executor/engine/engine.h"
#include "executor/memory/accounting_allocator.h"

namespace strata::testing_support {

struct ReplayedRank {
  std::int64_t peak_device_bytes = 0;  // set-up and the steps, as the device pool accounts them
  std::vector<TagUsage> tags;
};

// Rank world_rank of `plan` (which must have passed Plan::check_against_model) built on the
// recorder and stepped `steps` times over a corpus drawn from train.seed. Throws what the
// engine or (checks on) a kernel's shape check throws.
inline ReplayedRank replay_on_recorder(
    const ModelSpec& model, const TrainSpec& train, const Plan& plan, int world_rank, int steps,
    const engine::OffloadOptions& offload = {},
    cuda::KernelShapeChecks checks = cuda::KernelShapeChecks::kOn) {
  const ParallelDims dims = parallel_dims(plan, model);
  AccountingAllocator alloc{TierBudgets{}};
  cuda::PoolRecorder recorder(alloc, dims, world_rank, checks);
  ProcessGroups groups(recorder.communicators(), dims);
  const auto corpus = data::generated_corpus(train.seed, 1 << 16);
  data::BatchSampler sampler(corpus, train.seed, model.seq_len);
  // The values are never read: no initialisation (GPT-2's would take seconds).
  const model::UnitInit no_values = [](const UnitLayout&, float*, std::int64_t, std::int64_t) {};
  engine::Engine engine(recorder, model, train, plan, groups, groups.world(), sampler, offload,
                        no_values);
  for (int s = 0; s < steps; ++s) engine.step(s);
  return ReplayedRank{static_cast<std::int64_t>(alloc.peak_bytes().device), alloc.tags()};
}

// Every rank of `plan`, one after another (each alone: its peers' messages carry nothing).
inline void replay_every_rank(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                              int steps, const engine::OffloadOptions& offload = {}) {
  for (int r = 0; r < static_cast<int>(plan.world_size()); ++r) {
    replay_on_recorder(model, train, plan, r, steps, offload);
  }
}

}  // namespace strata::testing_support
