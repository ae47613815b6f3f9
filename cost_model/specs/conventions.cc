// Kernel conventions (see conventions.h): the two named sets and their JSON form.
#include "cost_model/specs/conventions.h"

#include <nlohmann/json.hpp>

namespace strata {

KernelConventions executor_conventions(Backend backend) {
  KernelConventions c;
  const bool cpu = backend == Backend::kCpu;
  c.attention = AttentionKernel::kFlash;  // both backends' kernels are tiled (flash) now
  c.dropout = false;
  c.separate_bias = cpu;
  c.recompute = cpu ? RecomputeScope::kToGeluOutput : RecomputeScope::kWholeLayer;
  c.recompute_regathers = false;
  c.activations = ActivationAccounting::kExecutor;
  return c;
}

KernelConventions megatron_lm_2021_conventions() {
  KernelConventions c;
  c.attention = AttentionKernel::kMaterialized;
  c.dropout = true;
  c.separate_bias = false;
  c.recompute = RecomputeScope::kWholeLayer;
  c.recompute_regathers = true;
  c.activations = ActivationAccounting::kPublished;
  c.zero3_module_gathers = true;
  c.fp32_gradient_reductions = false;
  return c;
}

KernelConventions KernelConventions::from_json(JsonObjectReader r) {
  KernelConventions c;
  c.attention = r.get_enum("attention", {"materialized", "flash"}) == "materialized"
                    ? AttentionKernel::kMaterialized
                    : AttentionKernel::kFlash;
  c.dropout = r.get_bool("dropout");
  c.separate_bias = r.get_enum("bias", {"fused", "separate"}) == "separate";
  c.recompute = r.get_enum("recompute", {"whole_layer", "to_gelu_output"}) == "whole_layer"
                    ? RecomputeScope::kWholeLayer
                    : RecomputeScope::kToGeluOutput;
  c.recompute_regathers = r.get_bool("zero3_recompute_regathers");
  c.activations = r.get_enum("activation_memory", {"published", "executor"}) == "published"
                      ? ActivationAccounting::kPublished
                      : ActivationAccounting::kExecutor;
  c.zero3_module_gathers = r.get_enum("zero3_gather", {"layer", "module"}) == "module";
  c.fp32_gradient_reductions =
      r.get_enum("gradient_reduction", {"fp32", "compute_dtype"}) == "fp32";
  r.finish();
  return c;
}

Json KernelConventions::to_json() const {
  return Json{{"attention", attention == AttentionKernel::kMaterialized ? "materialized" : "flash"},
              {"dropout", dropout},
              {"bias", separate_bias ? "separate" : "fused"},
              {"recompute", recompute == RecomputeScope::kWholeLayer ? "whole_layer" : "to_gelu_output"},
              {"zero3_recompute_regathers", recompute_regathers},
              {"activation_memory", activations == ActivationAccounting::kPublished ? "published" : "executor"},
              {"zero3_gather", zero3_module_gathers ? "module" : "layer"},
              {"gradient_reduction", fp32_gradient_reductions ? "fp32" : "compute_dtype"}};
}

}  // namespace strata
