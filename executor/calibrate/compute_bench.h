// Compute microbenchmarks of the CPU backend, run through the project's own kernels
// (kernels/cpu/*): the GEMMs of a model's linear layers (forward and both backward GEMMs),
// the memory-bound kernels (LayerNorm, GeLU, residual add) and causal attention. Each returns
// a rate in the Profile's units (cost_model/specs/profile.h). AdamW, copies and the memory
// bandwidth, which must be timed out of cache: memory_bench.h.
//
// GEMM shapes follow the time model's convention C(m,n) = A(m,k) B(k,n): a linear layer
// inp (BT, C) -> out (BT, OC) is, per pass,
//   forward          out   = inp @ W^T      m = BT, n = OC, k = C
//   backward input   dinp  = dout @ W       m = BT, n = C,  k = OC
//   backward weight  dW    = dout^T @ inp   m = OC, n = C,  k = BT
// and does 2 m n k FLOPs.
//
// Deliberately not here: timing policy (timing.h), collectives (collective_bench.h), which
// benchmarks a calibration runs (calibration.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/profile.h"
#include "executor/calibrate/timing.h"

namespace strata::calibrate {

// n values in [-0.5, 0.5) from a fixed sequence started by `seed`: what every benchmark's
// inputs hold (no denormals, no NaN, no zeros runs of a kind a kernel could skip), so every
// run does the same work.
std::vector<float> bench_values(std::int64_t n, std::uint32_t seed);

// One linear layer of a model at one micro-batch: inp (BT, C) -> out (BT, OC).
struct LinearShape {
  std::string name;  // "qkv", "proj", "fc1", "fc2", "logits"
  std::int64_t BT = 0, C = 0, OC = 0;
  bool bias = true;  // the tied logits layer has none
  // What the CUDA backend fuses into this layer's GEMMs as cuBLASLt epilogues
  // (executor/model/gpt_layer.cc), so that its timing includes them: fc1's forward applies
  // GeLU (saving the pre-activation); fc2's forward adds the residual (at tp 1 only: with
  // tp > 1 the sum comes after the all-reduce); fc2's input gradient applies GeLU's
  // derivative. The CPU backend runs these as kernels of their own (ignored there).
  bool gelu_epilogue = false;
  bool residual_epilogue = false;
  bool dgelu_epilogue = false;
  // logits: OC is the wte shard's rows, which the CUDA backend pads to whole blocks
  // (cost_model/specs/partition.h, vocab_row_alignment), so its GEMM runs on the padded rows.
  bool vocab_rows = false;
};

// A model's linear layers at tensor-parallel degree tp (qkv and fc1 split their outputs,
// proj and fc2 their inputs, logits the vocabulary), BT = micro_batch * seq_len, at the
// widths of cost_model's layer_gemm_shapes; GPT's:
//   qkv (BT, C, 3C/t), proj (BT, C/t, C), fc1 (BT, C, F/t), fc2 (BT, F/t, C), logits (BT, C, V/t),
// a Llama layer's qkv (BT, C, C/t + 2 kv_local HS) and fc1 (BT, C, 2F/t) (SwiGLU's gate|up);
// biases as the model has them (the logits never), the epilogue flags above set as the CUDA
// backend runs them (GeLU's only with GeLU).
// ConfigError when tp does not divide heads, ffn_hidden or vocab.
std::vector<LinearShape> model_linear_shapes(const ModelSpec& model, std::int64_t micro_batch,
                                             std::int64_t tp);

enum class GemmPass { kForward, kBackwardInput, kBackwardWeight };
std::string to_string(GemmPass pass);  // "forward" | "backward_input" | "backward_weight"

struct GemmMeasurement {
  LinearShape layer;
  GemmPass pass = GemmPass::kForward;
  std::int64_t m = 0, n = 0, k = 0;  // this pass's GEMM (see the header comment)
  double seconds = 0;                // median per call
  double flops() const { return 2.0 * static_cast<double>(m) * n * k; }
  double flops_per_s() const { return flops() / seconds; }
};

// Times one pass of a linear layer: forward through matmul_forward (bias included, as the
// model calls it), backward through sgemm with matmul_backward's transposes.
GemmMeasurement measure_linear(const LinearShape& layer, GemmPass pass,
                               const TimingOptions& timing);

// One Profile sample per distinct (m, n, k), sorted by (m, n, k): total FLOPs over total
// seconds of the measurements of that shape (passes of different layers can share a shape).
std::vector<GemmSample> gemm_samples(const std::vector<GemmMeasurement>& measurements);

// Seconds of the memory-bound kernels of one transformer layer's forward at tp = 1 on
// BT = B T tokens, as executor/model/gpt_layer.cc runs them: LayerNorm 1 and 2 on (BT, C),
// GeLU on (BT, F), the proj and fc2 bias adds on (BT, C) and the two residual adds. The
// calibration divides cost_model's layer_elementwise_bytes by it (compute_model.h).
double measure_layer_elementwise_s(std::int64_t BT, std::int64_t C, std::int64_t F,
                                   const TimingOptions& timing);

// Causal attention forward (the CPU backend's flash_attention_forward) on qkv (B, T, 3C)
// with NH heads, in the time model's unit: useful (causal) FLOPs per second, counting
// 2 B NH T^2 HS per forward (Q K^T and P V at 2 T^2 HS each per head, halved by the causal
// mask). See the time model's compute_model.cc, which divides 0.5 x the full 4 B NH T^2 HS
// by this rate.
double measure_attention_flops_per_s(std::int64_t B, std::int64_t T, std::int64_t C,
                                     std::int64_t NH, const TimingOptions& timing);
// Its seconds per call (what the rate divides into attention_causal_flops, compute_profile.h).
double measure_attention_s(std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t NH,
                           const TimingOptions& timing);

// The backward twin of measure_attention_flops_per_s: flash_attention_backward on the same
// shapes (log-sum-exp and output from one forward; the recomputed scores are not counted),
// in useful (causal) backward FLOPs per second, counting 4 B NH T^2 HS per backward
// (dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q at 2 T^2 HS each per head, halved by
// the causal mask): twice the forward's count.
double measure_attention_backward_flops_per_s(std::int64_t B, std::int64_t T, std::int64_t C,
                                              std::int64_t NH, const TimingOptions& timing);
double measure_attention_backward_s(std::int64_t B, std::int64_t T, std::int64_t C,
                                    std::int64_t NH, const TimingOptions& timing);

// The backward twin: LayerNorm 1 and 2 backward, the two residual-path gradient copies,
// GeLU backward on (BT, F) and the bias gradients of qkv (3C), proj (C), fc1 (F) and fc2 (C)
// (matmul_backward's row sums); divided into layer_backward_elementwise_bytes.
double measure_layer_elementwise_backward_s(std::int64_t BT, std::int64_t C, std::int64_t F,
                                            const TimingOptions& timing);

// How much slower one rank's kernels run when every core of the machine is busy with the same
// work: seconds per call of (the layer's forward GEMM, then GeLU over its output) while
// busy_cores - 1 forked processes run that loop too, over the seconds when it runs alone.
// Ranks sharing a node contend for its memory bandwidth, caches and (on a VM) hardware
// threads; the per-kernel rates above are timed alone. The median over 7 alone/busy pairs
// (see the .cc for why pairs). 1 when busy_cores < 2. Throws
// std::system_error when fork or mmap fails (the children are stopped and reaped first).
double measure_busy_cores_slowdown(const LinearShape& layer, int busy_cores,
                                   const TimingOptions& timing);

}  // namespace strata::calibrate
