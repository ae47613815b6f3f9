// One pre-LayerNorm transformer layer on one TP rank, forward and backward, written once
// over LayerOps for every backend:
//   y = r + fc2(gelu(fc1(ln2(r)))),  r = x + proj(attention(qkv(ln1(x))))
// with Megatron's tensor parallelism: qkv and fc1 column-parallel, proj and fc2 row-parallel
// (partial sums all-reduced over the TP group, then the replicated bias added once); in
// backward the gradients at the inputs of the column-parallel linears are all-reduced.
// Without TP the row-parallel biases ride in the GEMMs (the CUDA backend's fused epilogues:
// proj + bias, fc2 + bias + residual).
//
// Sequence parallelism (d.sp, Korthikanti et al. 2022): x, y, the LayerNorms and residuals
// hold this rank's d.rows() token rows; the LayerNorm outputs are all-gathered over TP
// before qkv / fc1 (and re-gathered in backward, so only the sharded ones are saved), the
// partial sums of proj / fc2 are reduce-scattered instead of all-reduced, and in backward
// the conjugates (all-gather of the output gradients, reduce-scatter of the input ones).
// The LayerNorm gain/bias gradients are then partial sums over this rank's rows: the
// Program sums them over TP (kSumNormGrads). The row-parallel bias gradients are taken from
// the gathered output gradient, so they are complete on every rank.
//
// Saved tensors follow the memory model's executor lists (cost_model/memory_model.h:
// layer_activation_tensors), one accounted tensor each, tagged "act/<name>"; ln1_in is the
// layer input, owned by the caller. Recomputation: drop_activations() frees what a policy
// does not keep (full: everything; selective: the attention core, its statistics and
// output), recompute_activations() rebuilds it right before the backward by rerunning the
// same kernels on the same inputs, so the result is bit-identical. Forward temporaries are
// tagged "forward_scratch", backward ones "backward_scratch".
// Deliberately not here: dropout, the pipeline (the engine keeps inputs and outputs).
#pragma once

#include "cost_model/param_layout.h"
#include "cost_model/plan.h"
#include "executor/engine/tensor.h"
#include "executor/model/layer_ops.h"
#include "executor/model/tp_context.h"

namespace strata::model {

using engine::Tensor;

// Pointers to a layer's tensors inside its flat buffer (parameters or gradients).
template <class P>
struct LayerTensors {
  P ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fc2_w, fc2_b;
};
// base: the unit's first element; element_bytes: of the buffer's dtype.
template <class P>
LayerTensors<P> layer_tensors(P base, const LayerOffsets& o, std::int64_t element_bytes) {
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<P>>, const char*, char*>;
  const auto at = [&](std::int64_t offset) {
    return reinterpret_cast<P>(reinterpret_cast<Byte>(base) + offset * element_bytes);
  };
  return {at(o.ln1_w), at(o.ln1_b), at(o.qkv_w), at(o.qkv_b), at(o.proj_w), at(o.proj_b),
          at(o.ln2_w), at(o.ln2_b), at(o.fc_w), at(o.fc_b), at(o.fc2_w), at(o.fc2_b)};
}
using LayerWeights = LayerTensors<const void*>;  // the compute dtype
using LayerGrads = LayerTensors<float*>;

// What a layer's forward keeps for its backward (besides its input). R = d.rows().
struct LayerActivations {
  Tensor ln1_mean, ln1_rstd, ln1_out;  // (R), (R), (R, C)
  Tensor qkv;                          // (BT, 3 Cl)
  Tensor attn_stats;                   // attention core: LayerOps::attention_stats_floats
  Tensor attn_out;                     // (BT, Cl)        attention core
  Tensor ln2_in;                       // (R, C) = r
  Tensor ln2_mean, ln2_rstd, ln2_out;  // (R), (R), (R, C)
  Tensor fc1_out, gelu_out;            // (BT, Fl)
};

// x: (R, C) the layer input; y: (R, C) written, or nullptr to stop after the GeLU (what a
// full recomputation needs: fc2 and its collective are skipped).
void layer_forward(LayerOps& ops, const LayerWeights& w, const void* x, void* y,
                   LayerActivations& acts, const Dims& d, TpContext& tp);

// Frees the tensors `recompute` does not keep (none: nothing).
void drop_activations(LayerActivations& acts, Recompute recompute);

// Rebuilds what drop_activations(acts, recompute) freed: full reruns layer_forward(x,
// nullptr), selective reruns the attention on the kept qkv. Collective over TP (full).
void recompute_activations(LayerOps& ops, const LayerWeights& w, const void* x,
                           LayerActivations& acts, Recompute recompute, const Dims& d,
                           TpContext& tp);

// dres: (R, C) the gradient at y on entry, the gradient at x on return (in place); g: the
// layer's gradients, ACCUMULATED. Frees what `acts` holds as soon as it is used.
void layer_backward(LayerOps& ops, const LayerWeights& w, const LayerGrads& g, const void* x,
                    LayerActivations& acts, void* dres, const Dims& d, TpContext& tp);

}  // namespace strata::model
