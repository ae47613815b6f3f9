// A predicted stage's memory by kind; see stage_memory_kinds.h.
#include "cost_model/memory/stage_memory_kinds.h"

#include <stdexcept>

namespace strata {

MemoryByKind memory_by_kind(const StageMemory& stage) {
  MemoryByKind b;
  b[MemoryKind::kParams] = stage.params;
  b[MemoryKind::kGradients] = stage.gradients;
  b[MemoryKind::kOptimizer] = stage.optimizer;
  b[MemoryKind::kHeadroom].device = stage.headroom_bytes;
  b[MemoryKind::kBuffers] = stage.buffers;
  b[MemoryKind::kBuffers].device -= stage.headroom_bytes;  // the memory model adds it there
  // The rest of each tier's total. Whole bytes below 2^53 on the executor conventions, so
  // the differences are exact and the kinds add up to the total exactly.
  TierBytes rest = stage.total;
  for (const TierBytes* held : {&stage.params, &stage.gradients, &stage.optimizer, &stage.buffers}) {
    rest.device -= held->device;
    rest.host -= held->host;
    rest.nvme -= held->nvme;
  }
  b[MemoryKind::kActivations] = rest;
  return b;
}

void fill_prediction_memory_kinds(const MemoryEstimate& estimate, StepReport& report) {
  if (report.per_rank.size() != estimate.stages.size()) {
    throw std::logic_error("fill_prediction_memory_kinds: per_rank is not one entry per stage");
  }
  for (std::size_t i = 0; i < estimate.stages.size(); ++i) {
    report.per_rank[i].by_kind = memory_by_kind(estimate.stages[i]);
    report.per_rank[i].in_flight = estimate.stages[i].in_flight;
  }
}

}  // namespace strata
