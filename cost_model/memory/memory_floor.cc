// The floor under the memory walk (see memory_floor.h for why it is a bound).
#include "cost_model/memory/memory_floor.h"

#include <algorithm>
#include <cstdint>

#include "cost_model/specs/model_state_bytes.h"
#include "cost_model/specs/param_layout.h"
#include "cost_model/specs/partition.h"

namespace strata {

double device_memory_floor(const ModelSpec& model, const ClusterSpec& cluster,
                           const TrainSpec& train, const Plan& plan,
                           const MemoryModelOptions& options) {
  if (options.published_activations) return 0;
  // The walk's premises: it is only made for plans that pass these (RankProgramCache::get).
  plan.check_against_model(model, train);
  if (options.headroom.fragmentation_fraction < 0) return 0;  // headroom not monotone: no floor
  const ActivationConvention convention = activation_convention(cluster.backend);
  const bool cuda = convention == ActivationConvention::kCudaExecutor;
  // The byte sizes as memory_model.cc's executor_terms computes them.
  const int cb = cuda ? backend_compute_bytes(Backend::kCuda) : train.compute_bytes();
  const bool sp = sequence_parallel_on(plan.sequence_parallel, plan.tp);
  const std::int64_t m = plan.micro_batches(train);
  const std::int64_t p = plan.pp;
  const std::int64_t v = plan.virtual_stages;
  const double tokens = static_cast<double>(model.seq_len * plan.micro_batch);
  // layer_saved + message (its input): every tensor the layer keeps after the recomputation's
  // drop.
  const double kept_layer = sum_bytes(apply_recompute(
      layer_activation_tensors(model, plan.micro_batch, plan.tp, sp, convention, cb), plan.recompute));
  const double workspace = device_workspace_bytes(options, cluster.backend);

  // Units as rank_unit_layouts makes them: one layer's count serves every layer (a layer's
  // tensors, layer_tensor_specs, do not depend on its index).
  const TpShape tp{plan.tp, 0, vocab_row_alignment(cluster.backend)};
  const auto device_state = [&](std::int64_t unit_params) {
    return unit_state(unit_params, plan.dp, plan.zero_stage, plan.offload, cb).bytes_on(OffloadTier::kNone);
  };
  const double layer_state = device_state(layer_layout(model, tp, 0).count);

  double floor = 0;
  for (const std::int64_t r : {std::int64_t{0}, p - 1}) {
    std::int64_t layers = 0;
    std::int64_t fewest = -1;  // the fewest layers of a chunk of rank r
    bool has_first = false, has_last = false;
    for (std::int64_t c = 0; c < v; ++c) {
      const ChunkLayers chunk = chunk_layers(model, plan, r, c);
      layers += chunk.layers;
      fewest = fewest < 0 ? chunk.layers : std::min(fewest, chunk.layers);
      has_first = has_first || chunk.first;
      has_last = has_last || chunk.last;
    }
    double persistent = static_cast<double>(layers) * layer_state;
    if (has_first) persistent += device_state(embedding_layout(model, tp).count);
    if (has_last) {
      if (!model.tied_output) {
        persistent += device_state(output_layout(model, tp).count);
      } else if (!has_first) {
        persistent += device_state(tied_copy_layout(model, tp).count);
      }
      persistent += device_state(final_norm_layout(model).count);
    }
    const double losses = has_last ? (static_cast<double>(m) + 1) * tokens * 4 : 0.0;
    const std::int64_t in_flight = in_flight_chunks(plan.schedule, p, v, m, r);
    const double held = static_cast<double>(in_flight * fewest) * kept_layer;
    double total = persistent + losses + held + workspace;
    if (options.headroom.any()) total += device_headroom_bytes(total, plan, options.headroom);
    floor = std::max(floor, total);
  }
  return floor;
}

}  // namespace strata
