// Kernel conventions: how the framework that runs a plan computes a layer, which decides
// the time and the memory the cost model gives it. strata's own executor on each backend is
// one set (executor_conventions); a published run is priced with the conventions of the
// framework that made it (Megatron-LM 2021: materialised attention, dropout, whole-layer
// recomputation), so that its figures are reproduced by mechanism and not by a fudge. A
// Profile may carry a set (configs/profiles/megatron-lm-2021.json); without one the
// prediction follows strata's executor on the cluster's backend.
// Deliberately not here: what each convention costs (compute_model.h, memory_model.h).
#pragma once

#include <string>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/json_reader.h"

namespace strata {

// How attention is computed, which decides its memory traffic and what it keeps.
enum class AttentionKernel {
  kMaterialized,  // scores and probabilities written to memory, fused scale-mask-softmax
                  // (Megatron 2021)
  kFlash,         // tiled (flash) attention: no s x s tensor in memory (strata's CUDA and
                  // CPU backends)
};

// What a full recomputation reruns.
enum class RecomputeScope {
  kWholeLayer,    // the layer's whole forward (Megatron's checkpointing, strata's CUDA engine)
  kToGeluOutput,  // up to the last tensor the backward needs: fc2, its bias, the residual add
                  // and the TP collective are skipped, their result being the next layer's
                  // saved input (strata's CPU engine)
};

// Which bytes a layer keeps for its backward (memory_model.h's ActivationConvention).
enum class ActivationAccounting {
  kPublished,  // Korthikanti et al. 2022: bf16, 1-byte dropout masks, s b h (34 + 5 a s / h)
  kExecutor,   // what strata's executor on the cluster's backend allocates
};

struct KernelConventions {
  AttentionKernel attention = AttentionKernel::kFlash;
  bool dropout = false;
  // Biases in passes of their own (strata's CPU backend) instead of fused into the GEMM
  // epilogue.
  bool separate_bias = false;
  RecomputeScope recompute = RecomputeScope::kWholeLayer;
  // ZeRO-3 gathers a layer again for its recomputed forward (a pass of its own in
  // DeepSpeed and Megatron); strata's engine keeps the layer gathered from the recompute
  // through the backward.
  bool recompute_regathers = false;
  ActivationAccounting activations = ActivationAccounting::kExecutor;
  // What ZeRO-3 gathers at once: a whole layer (strata's engine: one flat buffer per unit)
  // or one module of it (DeepSpeed: a hook per submodule gathers its own parameters), which
  // decides the gathered parameters live on the device (memory_model.h).
  bool zero3_module_gathers = false;
  // Gradients reduced (DP, the tied embedding, the SP norm and KV sums) in fp32 (strata's
  // engine: backend_facts.h's gradient_dtype) or in the compute dtype (Megatron-LM and
  // DeepSpeed of 2021 by default: the gradients live in the parameters' fp16/bf16).
  bool fp32_gradient_reductions = true;

  // JSON: {"attention": "materialized"|"flash", "dropout": bool, "bias": "fused"|"separate",
  // "recompute": "whole_layer"|"to_gelu_output", "zero3_recompute_regathers": bool,
  // "activation_memory": "published"|"executor", "zero3_gather": "layer"|"module",
  // "gradient_reduction": "fp32"|"compute_dtype"}, every key required.
  static KernelConventions from_json(JsonObjectReader r);
  Json to_json() const;
  bool operator==(const KernelConventions&) const = default;
};

// strata's executor on a backend: flash attention on both; CUDA fused biases and whole-layer
// recomputation; CPU separate biases, recomputation to the GeLU.
KernelConventions executor_conventions(Backend backend);

// The published Megatron-LM runs of 2021 (Narayanan et al.; Korthikanti et al. for the
// activations; DeepSpeed for their ZeRO-3 rows): materialised attention with dropout, fused
// biases, whole-layer recomputation as a pass of its own (ZeRO-3 gathers again for it), and
// ZeRO-3 gathering module by module.
KernelConventions megatron_lm_2021_conventions();

}  // namespace strata
