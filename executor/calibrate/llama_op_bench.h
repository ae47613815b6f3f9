// Llama's operators timed through a backend's LayerOps (executor/model/layer_ops.h), the calls
// a Llama layer makes (executor/model/gpt_layer.cc), so that each backend's rates are its own
// kernels': the layer's two RMSNorms forward and backward, SwiGLU forward and backward, the
// rotary embedding of q and k forward and backward, and grouped-query attention forward and
// backward at each head size asked for. One code path for every backend: the backend says how
// it times a call, how it fills a tensor, and how it runs the SwiGLU backward (LayerOps has it
// only inside fc2's backward GEMMs, which the GEMM samples already time).
// Deliberately not here: byte and FLOP counts (compute_profile.h turns the seconds into
// rates), which model the operators run at (calibration.h), the GPT operators
// (compute_bench.h, cuda_compute_bench.h).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "cost_model/specs/model_spec.h"
#include "executor/engine/tensor.h"
#include "executor/model/layer_ops.h"
#include "executor/model/tp_context.h"

namespace strata::calibrate {

// What a backend lends the benchmarks.
struct LlamaOpBackend {
  model::LayerOps* ops = nullptr;
  // Median seconds per call of `call` on the backend's clock (timing.h, cuda_timing.h).
  std::function<double(const std::function<void()>& call)> seconds;
  // `tensor` filled with bench_values(tensor.size(), seed) in its dtype (compute_bench.h).
  std::function<void(const engine::Tensor& tensor, std::uint32_t seed)> fill;
  // dinp (BT, 2F) OVERWRITTEN with SwiGLU's input gradient at pre (BT, 2F) for dout (BT, F),
  // as the backend's matmul_swiglu_backward runs it after its GEMMs.
  std::function<void(void* dinp, const void* pre, const void* dout, int BT, int F)>
      swiglu_backward;
};

// Where the operators run: one TP rank's dimensions of a Llama layer for one micro-batch
// (sequence parallelism off: the norms on (B T, C), SwiGLU on (B T, 2 Fl) -> (B T, Fl), the
// rotation on the NHl + KVHl heads of each packed q|k|v row), and grouped-query attention over
// NHl query heads sharing KVHl key/value heads at each of attention_head_sizes (the row width
// NHl x head size).
struct LlamaOpShape {
  model::Dims dims;
  std::vector<int> attention_head_sizes;
  bool backward = true;  // also the backward operators
};

// The shape of `model` at micro_batch and tp (make_dims), attention at the model's head size
// and at 64 and 128 (Llama 3's head sizes, and the CUDA attention kernel's). ConfigError when
// tp does not divide heads or ffn_hidden.
LlamaOpShape llama_op_shape(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                            bool backward);

// Seconds per call (0: not timed) of each operator as a layer runs it.
struct AttentionSeconds {
  int head_size = 0;
  double forward_s = 0;
  double backward_s = 0;
};
struct LlamaOpSeconds {
  double rmsnorm_s = 0;           // the layer's two rmsnorm_forward calls
  double rmsnorm_backward_s = 0;  // ... and two rmsnorm_backward calls
  double swiglu_s = 0;
  double swiglu_backward_s = 0;
  double rope_s = 0;              // q and k of one micro-batch's packed rows
  double rope_backward_s = 0;
  std::vector<AttentionSeconds> gqa;  // one a head size, in attention_head_sizes' order
  bool measured() const { return rmsnorm_s > 0; }
};

// Times every operator of `shape` (the backward ones when shape.backward) through `backend`.
LlamaOpSeconds measure_llama_ops(const LlamaOpBackend& backend, const LlamaOpShape& shape);

}  // namespace strata::calibrate
