// A run's validation loss: the mean of the engine's loss on validation batches 0..batches-1,
// the same batches at every evaluation so that evaluations compare. `strata run` and every job
// of `strata select` evaluate through this one function, summing in the same order, so the
// two report the same double for the same model, plan and data. Collective: every rank of the
// job calls it.
#pragma once

#include <cstdint>

#include "executor/data/batch.h"
#include "executor/engine/engine.h"

namespace strata::engine {

inline double validation_loss(Engine& engine, const data::BatchSampler& valid,
                              std::int64_t batches) {
  double sum = 0;
  for (std::int64_t j = 0; j < batches; ++j) sum += engine.evaluate(valid, j);
  return sum / static_cast<double>(batches);
}

}  // namespace strata::engine
