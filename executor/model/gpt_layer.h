// One pre-LayerNorm transformer layer on one TP rank, forward and backward:
//   y = r + fc2(gelu(fc1(ln2(r)))),  r = x + proj(attention(qkv(ln1(x))))
// with Megatron's tensor parallelism: qkv and fc1 column-parallel, proj and fc2 row-parallel
// (partial sums all-reduced over the TP group, then the replicated bias added once); in
// backward the gradients at the layer's inputs of the column-parallel linears are
// all-reduced.
//
// Sequence parallelism (d.sp, Korthikanti et al. 2022): x, y, the LayerNorms and residuals
// hold this rank's d.rows() token rows; the LayerNorm outputs are all-gathered over TP
// before qkv / fc1 (and re-gathered in backward, so only the sharded ones are saved), the
// partial sums of proj / fc2 are reduce-scattered instead of all-reduced, and in backward
// the conjugates (all-gather of the output gradients, reduce-scatter of the input ones).
// The LayerNorm gain/bias gradients are then partial sums over this rank's rows: the caller
// all-reduces them over TP once per step. The row-parallel bias gradients are taken from
// the gathered output gradient, so they are complete on every rank.
//
// Saved tensors follow the memory model's kCpuExecutor list (cost_model/memory_model.h:
// layer_activation_tensors), one accounted buffer each, tagged "act/<name>"; ln1_in is the
// layer input, owned by the caller. Recomputation: drop_activations() frees what a policy
// does not keep (full: everything; selective: the attention core, attn_probs and
// attn_out), recompute_activations() rebuilds it right before the backward by rerunning
// the same kernels on the same inputs, so the result is bit-identical.
// Forward temporaries are tagged "forward_scratch", backward ones "backward_scratch".
// Deliberately not here: dropout, the pipeline (the engine keeps inputs and outputs).
#pragma once

#include "cost_model/plan.h"
#include "executor/memory/accounting_allocator.h"
#include "cost_model/param_layout.h"
#include "executor/model/tp_context.h"

namespace strata::model {

// Pointers to a layer's tensors inside its flat buffer (parameters or gradients).
template <class P>
struct LayerTensors {
  P ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fc2_w, fc2_b;
};
template <class P>
LayerTensors<P> layer_tensors(P base, const LayerOffsets& o) {
  return {base + o.ln1_w, base + o.ln1_b, base + o.qkv_w, base + o.qkv_b,
          base + o.proj_w, base + o.proj_b, base + o.ln2_w, base + o.ln2_b,
          base + o.fc_w, base + o.fc_b, base + o.fc2_w, base + o.fc2_b};
}

// What a layer's forward keeps for its backward (besides its input). R = d.rows().
struct LayerActivations {
  Buffer ln1_mean, ln1_rstd, ln1_out;  // (R), (R), (R, C)
  Buffer qkv;                          // (BT, 3 Cl)
  Buffer attn_probs;                   // (B, NHl, T, T)  attention core
  Buffer attn_out;                     // (BT, Cl)        attention core
  Buffer ln2_in;                       // (R, C) = r
  Buffer ln2_mean, ln2_rstd, ln2_out;  // (R), (R), (R, C)
  Buffer fc1_out, gelu_out;            // (BT, Fl)
};

// x: (R, C) the layer input; y: (R, C) written, or nullptr to stop after the GeLU (what a
// full recomputation needs: fc2 and its collective are skipped). Allocates acts' buffers
// on the device tier.
void layer_forward(const LayerTensors<const float*>& w, const float* x, float* y,
                   LayerActivations& acts, const Dims& d, AccountingAllocator& alloc,
                   TpContext& tp);

// Frees the tensors `recompute` does not keep (none: nothing).
void drop_activations(LayerActivations& acts, Recompute recompute);

// Rebuilds what drop_activations(acts, recompute) freed: full reruns layer_forward(x,
// nullptr), selective reruns the attention on the kept qkv. Collective over TP (full).
void recompute_activations(const LayerTensors<const float*>& w, const float* x,
                           LayerActivations& acts, Recompute recompute, const Dims& d,
                           AccountingAllocator& alloc, TpContext& tp);

// dy: (R, C) gradient at y; dx: (R, C) OVERWRITTEN with the gradient at x; g: the layer's
// gradients, ACCUMULATED (+=). Temporaries tagged "backward_scratch".
void layer_backward(const LayerTensors<const float*>& w, const LayerTensors<float*>& g,
                    const float* x, const LayerActivations& acts, const float* dy, float* dx,
                    const Dims& d, AccountingAllocator& alloc, TpContext& tp);

// out: (rows, cols) += bias: (cols) broadcast over rows (the row-parallel bias, added once
// after the all-reduce / reduce-scatter).
void add_bias(float* out, const float* bias, int rows, int cols);

}  // namespace strata::model
