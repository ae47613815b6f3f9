// A predicted pipeline stage's memory by kind (memory_kinds.h): the memory model's terms
// (memory_model.h: StageMemory) told in the kinds a run's allocation tags are told in.
#pragma once

#include "cost_model/memory/memory_model.h"
#include "cost_model/specs/step_report.h"

namespace strata {

// params, gradients and optimizer are the stage's (gradients with ZeRO-2/3's full buffers
// live at the peak); headroom the reserved bytes; buffers the stage's other buffers; and
// activations the rest of the peak on the device: the executor walk's peak holds, besides
// the state, the saved tensors, working sets, messages, gathered units, token ids and the
// losses, and the sum of the published convention's terms has its activations there. So
// the kinds add up to the stage's total on every tier, to the byte.
MemoryByKind memory_by_kind(const StageMemory& stage);

// Writes by_kind and in_flight into the RankMemory fill_prediction_memory wrote for each of
// the estimate's stages (report.per_rank[i] is estimate.stages[i]'s).
void fill_prediction_memory_kinds(const MemoryEstimate& estimate, StepReport& report);

}  // namespace strata
