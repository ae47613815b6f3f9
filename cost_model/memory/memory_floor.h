// A floor under the memory walk: a lower bound on the worst rank's device bytes that
// estimate_memory reports, in O(p v) arithmetic without making or walking a rank's Program.
// The planner drops a candidate whose floor already exceeds the device before it pays for
// the walk (most of its time, on large clusters: planner.cc); the bound must therefore never
// be above the walked figure, to the bit, or a plan that fits would be dropped.
//
// Why it is a bound (the rules of program_memory.h's walk; memory_model.cc's arithmetic):
// the walk of rank r starts at persistent + losses (the model state on the device: every
// unit's unit_state bytes on the device tier, the last stage's m + 1 fp32 loss rows) and every
// later addition is either matched by an earlier one it frees (a release its gather, a
// consumed fetch, a reduced step gradient, a completed send its layer output, a backward the
// saved tensors and input of its forward) or nonnegative. A forward pass of a chunk with L
// layers adds its input (a received message, or the embedding's output) and, per layer, the
// layer's kept tensors besides its input (layer_saved) and its output (a message): L
// (layer_saved + message) + message, of which at most its output, one message, is freed (as
// a completed send) before its backward. So while F forwards are in flight (done, their
// backward not yet begun), at least F L_min (layer_saved + message) is held on top of the
// persistent state, L_min the fewest layers of a chunk of the rank. At the first op of the
// rank's first backward pass that the walk observes -- its gradient's receive (allocated,
// then observed, before it completes any send) or, on the last virtual stage, the head's
// backward (which allocates the gradient before it observes) -- the forwards in flight are
// all those run so far: in_flight_chunks(schedule, p, v, m, r) (warm-up plus one, capped at
// m v; the schedule's maximum, memory_model.h). Nothing is subtracted there that this
// floor counts. So the walked peak is >= persistent + losses + F L_min (layer_saved +
// message); the cut walk of steady_cut.h reports the same peak. Every figure is a whole
// number of bytes below 2^53 (program_memory.cc: exact_in_double), so the sums are exact.
// The device total then adds the workspace and the headroom (device_total_with_headroom,
// monotone in the walked bytes in floating point: each rounded step is), and the worst rank's
// is at least any rank's: the floor takes the first and the last rank, which the planner's
// worst-only estimate always walks.
// tests/cost_model/memory_floor_test.cc checks floor <= estimate on a broad matrix of plans.
#pragma once

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/memory/memory_model.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/train_spec.h"

namespace strata {

// <= estimate_memory(model, cluster, train, plan, options).worst.device. 0 for the published
// convention (estimate_memory's closed forms cost no walk). Throws InfeasiblePlan where
// estimate_memory would, for the plan's own checks (global batch, the model's split).
double device_memory_floor(const ModelSpec& model, const ClusterSpec& cluster,
                           const TrainSpec& train, const Plan& plan,
                           const MemoryModelOptions& options);

}  // namespace strata
