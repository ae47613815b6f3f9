// One pre-norm decoder layer on one TP rank, forward and backward, written once over
// LayerOps for every backend and every family (cost_model/specs/layer_tensors.h's choices):
//   y = r + fc2(act(fc1(norm2(r)))),  r = x + proj(attention(rope(qkv(norm1(x)))))
// norm LayerNorm (GPT-2) or RMSNorm (Llama); act GeLU, or SwiGLU over fc1's [gate | up]
// output; rope only with rotary positions (on the q and k heads of the packed qkv rows,
// before they are saved, so selective recomputation reruns the attention alone); the
// attention grouped-query when kv_heads < heads (Q and K|V are two tensors, adjacent in the
// layer's buffer, multiplied as one); biases only when the family has them.
// Megatron's tensor parallelism: qkv and fc1 column-parallel, proj and fc2 row-parallel
// (partial sums all-reduced over the TP group, then the replicated bias added once); in
// backward the gradients at the inputs of the column-parallel linears are all-reduced.
// Without TP the row-parallel biases ride in the GEMMs (the CUDA backend's fused epilogues:
// proj + bias, fc2 + bias + residual).
//
// Sequence parallelism (d.sp, Korthikanti et al. 2022): x, y, the norms and residuals
// hold this rank's d.rows() token rows; the norm outputs are all-gathered over TP
// before qkv / fc1 (and re-gathered in backward, so only the sharded ones are saved), the
// partial sums of proj / fc2 are reduce-scattered instead of all-reduced, and in backward
// the conjugates (all-gather of the output gradients, reduce-scatter of the input ones).
// The norm gain/bias gradients are then partial sums over this rank's rows: the
// Program sums them over TP (kSumNormGrads). The row-parallel bias gradients are taken from
// the gathered output gradient, so they are complete on every rank.
//
// Saved tensors follow the memory model's executor lists (cost_model/memory/memory_model.h:
// layer_activation_tensors), one accounted tensor each, tagged "act/<name>"; ln1_in is the
// layer input, owned by the caller. Recomputation: drop_activations() frees what a policy
// does not keep (full: everything; selective: the attention core, its statistics and
// output), recompute_activations() rebuilds it right before the backward by rerunning the
// same kernels on the same inputs, so the result is bit-identical. Forward temporaries are
// tagged "forward_scratch", backward ones "backward_scratch".
// Deliberately not here: dropout, the pipeline (the engine keeps inputs and outputs).
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>

#include "cost_model/specs/param_layout.h"
#include "cost_model/specs/plan.h"
#include "executor/engine/tensor.h"
#include "executor/model/layer_ops.h"
#include "executor/model/tp_context.h"

namespace strata::model {

using engine::Tensor;

// Pointers to a layer's tensors inside its flat buffer (parameters or gradients), by
// TensorCode; a tensor the family does not have (a bias, a LayerNorm bias, GPT's fused
// qkv_w under GQA) is null, which the ops read as "none".
// One slot per TensorCode (layer_tensors.h: codes 1 .. kLmHead, new ones appended; a code
// past the bound throws std::out_of_range rather than writing past the array).
inline constexpr std::size_t kTensorCodeSlots = kLmHead + 1;
template <class P>
class LayerTensors {
 public:
  P operator[](TensorCode code) const { return at_.at(static_cast<std::size_t>(code)); }
  void set(TensorCode code, P p) { at_.at(static_cast<std::size_t>(code)) = p; }
  // The Q|K|V GEMM's weight and bias: GPT's fused qkv_w, or Q followed by K|V (checked
  // adjacent by layer_tensors) read as one (C/t + 2 KV/t HS, C) matrix.
  P qkv_weight() const { return (*this)[kQkvW] != nullptr ? (*this)[kQkvW] : (*this)[kQW]; }
  P qkv_bias() const { return (*this)[kQkvB]; }

 private:
  std::array<P, kTensorCodeSlots> at_{};
};
void check_qkv_adjacent(const UnitLayout& layer);  // the throw of layer_tensors below
// base: the unit's first element; element_bytes: of the buffer's dtype. The tensors are the
// unit's segments (param_layout.h, from layer_tensors.h's one description). Throws
// std::invalid_argument when Q and K|V are not adjacent (a Q bias between them: biases with
// grouped-query attention are not run yet).
template <class P>
LayerTensors<P> layer_tensors(P base, const UnitLayout& layer, std::int64_t element_bytes) {
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<P>>, const char*, char*>;
  LayerTensors<P> t;
  for (const ParamSegment& s : layer.segments) {
    t.set(static_cast<TensorCode>(s.code),
          reinterpret_cast<P>(reinterpret_cast<Byte>(base) + s.offset * element_bytes));
  }
  check_qkv_adjacent(layer);
  return t;
}
using LayerWeights = LayerTensors<const void*>;  // the compute dtype
using LayerGrads = LayerTensors<float*>;

// What a layer's forward keeps for its backward (besides its input). R = d.rows().
// The means stay empty under RMSNorm.
struct LayerActivations {
  Tensor ln1_mean, ln1_rstd, ln1_out;  // (R), (R), (R, C)
  Tensor qkv;                          // (BT, qkv_width): q and k rotated with RoPE
  Tensor attn_stats;                   // attention core: LayerOps::attention_stats_floats
  Tensor attn_out;                     // (BT, Cl)        attention core
  Tensor ln2_in;                       // (R, C) = r
  Tensor ln2_mean, ln2_rstd, ln2_out;  // (R), (R), (R, C)
  Tensor fc1_out;                      // (BT, fc1_width)
  Tensor gelu_out;                     // (BT, Fl): the activation's output (GeLU or SwiGLU)
};

// x: (R, C) the layer input; y: (R, C) written, or nullptr to stop after the activation (what a
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
