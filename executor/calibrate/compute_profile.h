// Turning what a compute calibration measured into the Profile's units, the same for every
// backend: the time model (cost_model/pricing/compute_model.cc) reads each rate back through its own
// byte and FLOP counts, so each rate here is that count over the measured seconds, and a
// prediction at the measured shape gives back the measured time:
//   - gemm: one sample per (m, n, k), total FLOPs over total seconds (gemm_samples);
//   - elementwise_bytes_per_s: layer_elementwise_bytes(model, micro_batch, tp 1, no SP,
//     kernels, element_bytes) over the seconds of one layer's forward memory-bound kernels;
//     elementwise_backward_bytes_per_s likewise with layer_backward_elementwise_bytes;
//   - attention_flops_per_s: attention_causal_flops over one forward's seconds (the model
//     divides half the full 4 B NH T^2 HS by it), attention_backward_flops_per_s:
//     attention_backward_causal_flops over one backward's seconds;
//   - Llama's operators (llama_op_bench.h), at the Llama model they ran at: rmsnorm_, swiglu_
//     and rope_bytes_per_s (and _backward_) are llama_op_bytes over each one's seconds, and a
//     gqa_attention sample a head size the attention counts above at that head size.
// The elementwise timings ran GPT's kernels (LayerNorm, GeLU, biases), so their bytes are
// counted as a GPT layer's of the model's sizes, whatever the model's family.
// Rates whose unit needs no model (params/s, bytes/s) pass through as measured.
// Deliberately not here: running benchmarks (calibration.h and the backends' benches), the
// machine, backend and headroom fields (the backend's calibration sets them).
#pragma once

#include <cstdint>
#include <vector>

#include "cost_model/pricing/compute_model.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/profile.h"
#include "executor/calibrate/compute_bench.h"
#include "executor/calibrate/llama_op_bench.h"

namespace strata::calibrate {

// Useful (causal) FLOPs of one attention forward over (B, T) tokens, C = NH * HS: Q K^T and
// P V at 2 T^2 HS each per (sequence, head), halved by the causal mask: 2 B NH T^2 HS.
double attention_causal_flops(std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t NH);
// The backward's: dP, dV, dQ, dK at 2 T^2 HS each, halved: 4 B NH T^2 HS (twice the forward's).
double attention_backward_causal_flops(std::int64_t B, std::int64_t T, std::int64_t C,
                                       std::int64_t NH);

// Seconds per call as measured (0: not measured, which leaves the Profile's field 0, the time
// model's "use the fallback"), and rates that need no conversion.
struct ComputeMeasurements {
  std::vector<GemmMeasurement> gemms;
  double layer_elementwise_s = 0;           // one layer's forward memory-bound kernels
  double layer_elementwise_backward_s = 0;  // ... and backward's
  double attention_s = 0;                   // one attention forward at the shapes below
  double attention_backward_s = 0;
  LlamaOpSeconds llama;                     // at MeasuredAt::llama_model (empty: not timed)
  double device_adam_params_per_s = 0;
  double cpu_adam_params_per_s = 0;
  double host_to_device_bytes_per_s = 0;
  double device_to_host_bytes_per_s = 0;
  double host_memory_bytes_per_s = 0;          // memory_bench.h: out of cache, all cores
  std::int64_t memory_working_set_bytes = 0;   // what the host-memory rates ran on
  std::int64_t last_level_cache_bytes = 0;
};

// Where the elementwise and attention timings ran and with which kernels: the layer's
// elementwise kernels at tp 1 on micro_batch x model.seq_len tokens; attention on
// micro_batch sequences of model.seq_len with hidden / tp and heads / tp; Llama's operators
// at llama_model's shape (llama_op_shape) at micro_batch and tp.
struct MeasuredAt {
  ModelSpec model;
  ModelSpec llama_model;
  std::int64_t micro_batch = 1;
  std::int64_t tp = 1;
  LayerKernels kernels;       // the backend's (executor_conventions)
  double element_bytes = 4;   // of its activations: 4 fp32 (CPU), 2 bf16 (CUDA)
};

// The Profile's compute fields from the measurements (see the header comment); machine,
// backend, collectives, NVMe and headroom left empty. ConfigError when a shape is invalid
// (tp not dividing the heads).
Profile compute_profile(const ComputeMeasurements& measured, const MeasuredAt& at);

}  // namespace strata::calibrate
