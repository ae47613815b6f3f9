// One pre-LayerNorm transformer layer on one TP rank, forward and backward:
//   y = r + fc2(gelu(fc1(ln2(r)))),  r = x + proj(attention(qkv(ln1(x))))
// with Megatron's tensor parallelism: qkv and fc1 column-parallel, proj and fc2 row-parallel
// (partial sums all-reduced over the TP group, then the replicated bias added once); in
// backward the gradients at the layer's inputs of the column-parallel linears are
// all-reduced. Saved tensors follow the memory model's kCpuExecutor list
// (cost_model/memory_model.h: layer_activation_tensors), one accounted buffer each, tagged
// "act/<name>"; ln1_in is the layer input, owned by the caller (the previous layer's output
// or the chunk input). Deliberately not here: recomputation, sequence parallelism, dropout.
#pragma once

#include "executor/memory/accounting_allocator.h"
#include "executor/model/param_layout.h"
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

// What a layer's forward keeps for its backward (besides its input).
struct LayerActivations {
  Buffer ln1_mean, ln1_rstd, ln1_out;  // (BT), (BT), (BT, C)
  Buffer qkv;                          // (BT, 3 Cl)
  Buffer attn_probs;                   // (B, NHl, T, T)
  Buffer attn_out;                     // (BT, Cl)
  Buffer ln2_in;                       // (BT, C) = r
  Buffer ln2_mean, ln2_rstd, ln2_out;  // (BT), (BT), (BT, C)
  Buffer fc1_out, gelu_out;            // (BT, Fl)
};

// x: (BT, C) the layer input; y: (BT, C) written. Allocates acts' buffers on the device tier.
void layer_forward(const LayerTensors<const float*>& w, const float* x, float* y,
                   LayerActivations& acts, const Dims& d, AccountingAllocator& alloc,
                   TpContext& tp);

// dy: (BT, C) gradient at y; dx: (BT, C) OVERWRITTEN with the gradient at x; g: the layer's
// gradients, ACCUMULATED (+=). Temporaries tagged "backward_scratch".
void layer_backward(const LayerTensors<const float*>& w, const LayerTensors<float*>& g,
                    const float* x, const LayerActivations& acts, const float* dy, float* dx,
                    const Dims& d, AccountingAllocator& alloc, TpContext& tp);

// out: (rows, cols) += bias: (cols) broadcast over rows (the row-parallel bias, added once
// after the all-reduce).
void add_bias(float* out, const float* bias, int rows, int cols);

}  // namespace strata::model
