// Local dimensions of a TP rank (see tp_context.h).
#include "executor/model/tp_context.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "cost_model/specs/backend_facts.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/layer_tensors.h"
#include "cost_model/specs/partition.h"

namespace strata::model {

Dims make_dims(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
               std::int64_t tp_rank, bool sequence_parallel,
               std::int64_t vocab_row_alignment) {
  Dims d;
  d.B = static_cast<int>(micro_batch);
  d.T = static_cast<int>(model.seq_len);
  d.C = static_cast<int>(model.hidden);
  d.F = static_cast<int>(model.ffn_hidden);
  d.NH = static_cast<int>(model.heads);
  d.V = static_cast<int>(model.vocab);
  d.t = static_cast<int>(tp);
  d.tp_rank = static_cast<int>(tp_rank);
  d.Cl = d.C / d.t;
  d.NHl = d.NH / d.t;
  d.Fl = d.F / d.t;
  d.Vshard = static_cast<int>(vocab_shard_rows(model, tp, vocab_row_alignment));
  const int real_rows = static_cast<int>(vocab_shard_rows(model, tp));
  d.v0 = real_rows * d.tp_rank;
  d.Vvalid = std::clamp(d.V - d.v0, 0, real_rows);
  d.HS = d.C / d.NH;
  if (const std::string why = executor_family_violation(model); !why.empty()) {
    throw InfeasiblePlan(why);
  }
  d.KVH = static_cast<int>(model.kv_head_count());
  // Split over TP, or one head a rank when t > kv_heads (which one: the weights' local
  // shape, layer_tensors.h, so the attention takes the rank's K|V as they come).
  d.KVHl = static_cast<int>(kv_heads_per_rank(model, tp));
  d.norm = model.norm;
  d.norm_eps = static_cast<float>(model.norm_epsilon);
  d.mlp = model.mlp;
  d.position = model.position;
  d.rope.theta = model.rope_theta;
  if (model.rope_scaling) {
    d.rope.factor = model.rope_scaling->factor;
    d.rope.low_freq_factor = model.rope_scaling->low_freq_factor;
    d.rope.high_freq_factor = model.rope_scaling->high_freq_factor;
    d.rope.original_max_positions =
        static_cast<double>(model.rope_scaling->original_max_position_embeddings);
  }
  d.sp = sequence_parallel_on(sequence_parallel, tp);
  if (d.sp) {
    if (const std::string why = sequence_parallel_violation(model, tp); !why.empty()) {
      throw InfeasiblePlan(why);
    }
  }
  return d;
}

}  // namespace strata::model
