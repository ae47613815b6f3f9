// The plan's cut of the model over ranks (see partition.h).
#include "cost_model/specs/partition.h"

#include "cost_model/specs/backend_facts.h"

#include <optional>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata {
namespace {

void check_dims(const ParallelDims& dims) {
  if (dims.tp < 1 || dims.pp < 1 || dims.dp < 1) {
    throw InfeasiblePlan(fmt::format(
        "rank layout: parallel degrees must be >= 1, got tp={} pp={} dp={}", dims.tp,
        dims.pp, dims.dp));
  }
}

void check_rank(int world_rank, const ParallelDims& dims) {
  check_dims(dims);
  if (world_rank < 0 || world_rank >= dims.world_size()) {
    throw InfeasiblePlan(fmt::format(
        "rank layout: world rank {} is outside 0..{} (tp*pp*dp = {}*{}*{})", world_rank,
        dims.world_size() - 1, dims.tp, dims.pp, dims.dp));
  }
}

}  // namespace

RankCoords rank_coords(int world_rank, const ParallelDims& dims) {
  check_rank(world_rank, dims);
  RankCoords c;
  c.tp = world_rank % dims.tp;
  c.dp = (world_rank / dims.tp) % dims.dp;
  c.pp = world_rank / (dims.tp * dims.dp);
  return c;
}

int world_rank_of(const RankCoords& c, const ParallelDims& dims) {
  check_dims(dims);
  if (c.tp < 0 || c.tp >= dims.tp || c.dp < 0 || c.dp >= dims.dp || c.pp < 0 ||
      c.pp >= dims.pp) {
    throw InfeasiblePlan(fmt::format(
        "rank layout: coordinates (tp={}, dp={}, pp={}) are outside tp<{} dp<{} pp<{}", c.tp,
        c.dp, c.pp, dims.tp, dims.dp, dims.pp));
  }
  return c.pp * (dims.tp * dims.dp) + c.dp * dims.tp + c.tp;
}

ParallelDims parallel_dims(const Plan& plan) {
  return ParallelDims{static_cast<int>(plan.tp), static_cast<int>(plan.pp), static_cast<int>(plan.dp)};
}

ParallelDims parallel_dims(const Plan& plan, const ModelSpec& model) {
  ParallelDims dims = parallel_dims(plan);
  dims.kv_copies = static_cast<int>(kv_head_copies(model, plan.tp));
  return dims;
}


std::string tensor_parallel_violation(const ModelSpec& model, std::int64_t tp) {
  if (tp < 1) return fmt::format("tp = {}, expected >= 1", tp);
  if (model.heads % tp != 0) {
    return fmt::format("heads % tp = {} % {} = {}, but tensor parallelism splits whole heads",
                       model.heads, tp, model.heads % tp);
  }
  // KV heads split like the query heads while there are enough of them; past that each rank
  // holds the KV head of its query heads' group, which needs t to be a multiple of kv_heads
  // (Megatron-Core's GQA replication).
  const std::int64_t kv = model.kv_head_count();
  if (kv % tp != 0 && tp % kv != 0) {
    return fmt::format("kv_heads = {} and tp = {}: tensor parallelism needs kv_heads % tp == 0 "
                       "(KV heads split) or tp % kv_heads == 0 (KV heads replicated), got {} "
                       "and {}", kv, tp, kv % tp, tp % kv);
  }
  if (model.hidden % tp != 0) {
    return fmt::format("hidden % tp = {} % {} = {}, but tensor parallelism splits the width evenly",
                       model.hidden, tp, model.hidden % tp);
  }
  if (model.ffn_hidden % tp != 0) {
    return fmt::format("ffn_hidden % tp = {} % {} = {}, but tensor parallelism splits the MLP "
                       "evenly", model.ffn_hidden, tp, model.ffn_hidden % tp);
  }
  return {};
}

std::string sequence_parallel_violation(const ModelSpec& model, std::int64_t tp) {
  if (tp <= 1) return fmt::format("sequence_parallel = true needs tp > 1, got tp = {}", tp);
  if (model.seq_len % tp != 0) {
    return fmt::format("sequence parallelism needs seq_len % tp == 0, but {} % {} = {}",
                       model.seq_len, tp, model.seq_len % tp);
  }
  return {};
}

std::string interleaved_violation(std::int64_t pp, std::int64_t micro_batches) {
  if (micro_batches % pp == 0) return {};
  return fmt::format("the interleaved schedule needs micro-batches m % pp == 0, but {} % {} = {}",
                     micro_batches, pp, micro_batches % pp);
}

std::string pipeline_violation(const ModelSpec& model, std::int64_t pp, std::int64_t v) {
  if (pp < 1 || v < 1) return fmt::format("pp = {} and v = {} must be >= 1", pp, v);
  if (model.layers % (pp * v) != 0) {
    return fmt::format("layers % (pp*v) = {} % ({}*{}) = {}, but every model chunk needs the same "
                       "number of layers", model.layers, pp, v, model.layers % (pp * v));
  }
  return {};
}

namespace {

// The first and last virtual stage's layer counts (0: the even share), with Megatron-Core's
// accounting options resolved into them, or why they cannot be.
struct StageCounts {
  std::int64_t first = 0;
  std::int64_t last = 0;
  std::string violation;
};
StageCounts stage_counts(const ModelSpec& model, const Plan& plan) {
  StageCounts c{plan.first_stage_layers, plan.last_stage_layers, {}};
  if (!plan.embedding_counts_as_layer && !plan.loss_counts_as_layer) return c;
  if (plan.first_stage_layers > 0 || plan.last_stage_layers > 0) {
    c.violation = "embedding_counts_as_layer / loss_counts_as_layer set the first and last "
                  "stage's layers; give them or first_stage_layers / last_stage_layers, not both";
    return c;
  }
  const std::int64_t stages = plan.pp * plan.virtual_stages;
  const std::int64_t counted = model.layers + (plan.embedding_counts_as_layer ? 1 : 0) +
                               (plan.loss_counts_as_layer ? 1 : 0);
  if (counted % stages != 0 || counted / stages < 2) {
    c.violation = fmt::format(
        "with the embedding and/or the loss counted as a layer, the {} layers so counted must "
        "split evenly over pp*v = {} virtual stages, at least 2 each (one of them real in the "
        "first and the last)", counted, stages);
    return c;
  }
  const std::int64_t share = counted / stages;
  if (plan.embedding_counts_as_layer) c.first = share - 1;
  if (plan.loss_counts_as_layer) c.last = share - 1;
  return c;
}

// Uneven stages: how many stages take the even share, and that share.
struct UnevenSplit {
  std::int64_t shared_stages = 0;
  std::int64_t shared_layers = 0;  // in all of them together
};
UnevenSplit uneven_split(const ModelSpec& model, const Plan& plan, const StageCounts& counts) {
  UnevenSplit u;
  u.shared_stages = plan.pp * plan.virtual_stages - (counts.first > 0 ? 1 : 0) -
                    (counts.last > 0 ? 1 : 0);
  u.shared_layers = model.layers - counts.first - counts.last;
  return u;
}

}  // namespace

std::string pipeline_violation(const ModelSpec& model, const Plan& plan) {
  if (!plan.uneven_stages()) return pipeline_violation(model, plan.pp, plan.virtual_stages);
  if (plan.virtual_stages < 1) return pipeline_violation(model, plan.pp, plan.virtual_stages);
  if (plan.pp < 2) {
    return fmt::format("uneven stages (first_stage_layers = {}, last_stage_layers = {}{}{}) need "
                       "a pipeline, got pp = {}", plan.first_stage_layers, plan.last_stage_layers,
                       plan.embedding_counts_as_layer ? ", the embedding counted as a layer" : "",
                       plan.loss_counts_as_layer ? ", the loss counted as a layer" : "", plan.pp);
  }
  const StageCounts counts = stage_counts(model, plan);
  if (!counts.violation.empty()) return counts.violation;
  const UnevenSplit u = uneven_split(model, plan, counts);
  if (u.shared_stages == 0) {
    if (u.shared_layers != 0) {
      return fmt::format("first_stage_layers + last_stage_layers = {} + {} must be the model's {} "
                         "layers with pp * v = 2", counts.first, counts.last, model.layers);
    }
    return {};
  }
  if (u.shared_layers < u.shared_stages || u.shared_layers % u.shared_stages != 0) {
    return fmt::format("uneven stages: the {} layers left after first_stage_layers = {} and "
                       "last_stage_layers = {} do not split evenly (at least one each) over the "
                       "other {} {}stages", u.shared_layers, counts.first, counts.last,
                       u.shared_stages, plan.virtual_stages > 1 ? "virtual " : "");
  }
  return {};
}

ChunkLayers chunk_layers(const ModelSpec& model, const Plan& plan, std::int64_t pp_rank,
                         std::int64_t chunk) {
  if (const std::string why = pipeline_violation(model, plan); !why.empty()) {
    throw InfeasiblePlan(why);
  }
  if (pp_rank < 0 || pp_rank >= plan.pp || chunk < 0 || chunk >= plan.virtual_stages) {
    throw InfeasiblePlan(fmt::format("chunk {} of pipeline rank {} is outside p = {}, v = {}",
                                     chunk, pp_rank, plan.pp, plan.virtual_stages));
  }
  const std::int64_t stages = plan.pp * plan.virtual_stages;
  ChunkLayers c;
  c.vstage = virtual_stage_of(plan.pp, pp_rank, chunk);
  c.first = c.vstage == 0;
  c.last = c.vstage == stages - 1;
  if (!plan.uneven_stages()) {
    c.layers = model.layers / stages;
    c.first_layer = c.vstage * c.layers;
    return c;
  }
  const StageCounts counts = stage_counts(model, plan);
  const UnevenSplit u = uneven_split(model, plan, counts);
  const std::int64_t shared = u.shared_stages > 0 ? u.shared_layers / u.shared_stages : 0;
  const std::int64_t first = counts.first > 0 ? counts.first : shared;
  const std::int64_t last = counts.last > 0 ? counts.last : shared;
  c.layers = c.first ? first : (c.last ? last : shared);
  // Layers are assigned in virtual-stage order (Megatron's interleaving).
  c.first_layer = c.first ? 0 : first + (c.vstage - 1) * shared;
  return c;
}

std::vector<UnitLayout> rank_unit_layouts(const ModelSpec& model, const Plan& plan,
                                          std::int64_t pp_rank, std::int64_t tp_rank,
                                          std::int64_t vocab_row_alignment,
                                          UnitSegments segments) {
  const bool omit = segments == UnitSegments::kOmitted;
  const TpShape tp{plan.tp, tp_rank, vocab_row_alignment};
  bool has_first = false, has_last = false;
  std::vector<UnitLayout> layers;
  // Every layer has the same tensors (layer_tensor_specs does not read the index): one
  // layout made, the others its copies with their index (build_unit reads it for the name
  // and the segments' layer alone); the planner makes thousands of ranks.
  std::optional<UnitLayout> any_layer;
  for (std::int64_t c = 0; c < plan.virtual_stages; ++c) {
    const ChunkLayers chunk = chunk_layers(model, plan, pp_rank, c);
    has_first = has_first || chunk.first;
    has_last = has_last || chunk.last;
    for (std::int64_t l = chunk.first_layer; l < chunk.first_layer + chunk.layers; ++l) {
      if (!any_layer) {
        any_layer = layer_layout(model, tp, l);
        if (omit) any_layer->segments.clear();
        layers.push_back(*any_layer);
        continue;
      }
      UnitLayout layer = *any_layer;
      layer.name = "layer" + std::to_string(l);
      layer.layer = l;
      for (ParamSegment& segment : layer.segments) segment.layer = l;
      layers.push_back(std::move(layer));
    }
  }
  std::vector<UnitLayout> out;
  if (has_first) out.push_back(embedding_layout(model, tp));
  for (auto& l : layers) out.push_back(std::move(l));
  if (has_last) {
    if (!model.tied_output) {
      out.push_back(output_layout(model, tp));
    } else if (!has_first) {
      out.push_back(tied_copy_layout(model, tp));
    }
    out.push_back(final_norm_layout(model));
  }
  if (omit) {
    for (UnitLayout& unit : out) unit.segments.clear();
  }
  return out;
}

std::int64_t vocab_row_alignment(Backend backend) { return backend_facts(backend).vocab_row_alignment; }

std::int64_t unit_chunk(const ModelSpec& model, const Plan& plan, std::int64_t pp_rank,
                        const UnitLayout& unit) {
  switch (unit.kind) {
    case UnitKind::kEmbedding: return 0;
    case UnitKind::kTiedCopy:
    case UnitKind::kOutput:
    case UnitKind::kFinalNorm: return plan.virtual_stages - 1;
    case UnitKind::kLayer: {
      for (std::int64_t c = 0; c < plan.virtual_stages; ++c) {
        const ChunkLayers chunk = chunk_layers(model, plan, pp_rank, c);
        if (unit.layer >= chunk.first_layer && unit.layer < chunk.first_layer + chunk.layers) return c;
      }
      throw InfeasiblePlan(fmt::format("unit {} is not on pipeline rank {}", unit.name, pp_rank));
    }
  }
  return 0;
}

}  // namespace strata
