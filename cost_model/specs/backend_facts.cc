// The backends' descriptions and the rules that follow from them (see backend_facts.h).
#include "cost_model/specs/backend_facts.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cost_model/specs/units.h"

namespace strata {
namespace {

// BackendFacts::default_host_headroom's figures.
HostHeadroom measured_host_headroom() {
  HostHeadroom h;
  h.reserved_fraction = 0.019;
  h.per_rank_bytes = 32 * units::kMiB;
  h.source = "strata's default for a cluster file without \"host_headroom\": measured on a 24 GiB "
             "VM (2026-11-28): the kernel and firmware keep 1.9% (MemTotal 24,683,620 kB), a "
             "CPU-backend rank 32 MiB beside its tensors (peak resident 34,252 kB with 8.6 MiB "
             "of them); a CUDA rank's host runtime is not measured yet";
  return h;
}

BackendFacts cpu_facts() {
  BackendFacts f;
  f.backend = Backend::kCpu;
  f.name = "CPU";
  f.compute_dtype = DType::kF32;
  f.vocab_row_alignment = 1;
  f.tp_width_multiple = 1;
  f.workspace_bytes = 0;
  f.host_optimizer_in_backward = true;
  f.host_steps_carried = true;
  f.default_host_headroom = measured_host_headroom();
  return f;
}

BackendFacts cuda_facts() {
  BackendFacts f;
  f.backend = Backend::kCuda;
  f.name = "CUDA";
  f.compute_dtype = DType::kBF16;
  f.vocab_row_alignment = 128;
  f.head_sizes = {64, 128};
  f.tp_width_multiple = 8;
  f.precisions = {Precision::kBf16};
  f.workspace_bytes = (32 + 4) * units::kMiB;
  f.default_headroom.context_bytes = 532.8125 * units::kMiB;
  f.default_headroom.communicator_bytes = 576 * units::kMiB;
  f.default_headroom.fragmentation_fraction = 0;
  f.default_headroom.source =
      "strata's default for a CUDA cluster file without \"device_headroom\": what `strata "
      "calibrate --backend cuda` measured on an NVIDIA H200 "
      "(configs/profiles/h200-calibrated-2026-11-26.json): 533 MiB of CUDA context with "
      "cuBLASLt, 576 MiB per NCCL communicator, no caching allocator";
  f.default_host_headroom = measured_host_headroom();
  f.host_steps_carried = true;
  return f;
}

}  // namespace

const BackendFacts& backend_facts(Backend backend) {
  static const BackendFacts kCpu = cpu_facts();
  static const BackendFacts kCuda = cuda_facts();
  return backend == Backend::kCuda ? kCuda : kCpu;
}

const HostHeadroom& host_headroom_for(const ClusterSpec& cluster) {
  if (cluster.host_headroom.any() || !cluster.host_headroom.source.empty()) {
    return cluster.host_headroom;
  }
  return backend_facts(cluster.backend).default_host_headroom;
}

std::string executor_family_violation(const ModelSpec& model) {
  const std::int64_t kv = model.kv_head_count();
  if (kv != model.heads && model.biases) {
    return fmt::format(
        "kv_heads {} < heads {} with biases: grouped-query attention with biases is not run "
        "yet", kv, model.heads);
  }
  if (model.norm == NormKind::kLayerNorm && !model.biases) {
    return "a LayerNorm without biases is not run yet";
  }
  return "";
}

std::string backend_violation(const BackendFacts& backend, const ModelSpec& model,
                              const TrainSpec& train, std::int64_t tp) {
  const char* name = backend.name;
  const std::int64_t head_size = model.hidden / model.heads;
  const auto& sizes = backend.head_sizes;
  if (!sizes.empty() && std::find(sizes.begin(), sizes.end(), head_size) == sizes.end()) {
    return fmt::format("hidden / heads = {} / {} = {}; the {} attention kernel supports head "
                       "size {}", model.hidden, model.heads, head_size, name,
                       fmt::join(sizes, " or "));
  }
  const std::int64_t m = backend.tp_width_multiple;
  if ((model.hidden / tp) % m != 0 || (model.ffn_hidden / tp) % m != 0) {
    return fmt::format("hidden / tp = {} and ffn_hidden / tp = {} must be multiples of {} on "
                       "the {} backend (16-byte aligned rows)",
                       model.hidden / tp, model.ffn_hidden / tp, m, name);
  }
  const auto& precisions = backend.precisions;
  if (!precisions.empty() &&
      std::find(precisions.begin(), precisions.end(), train.precision) == precisions.end()) {
    return fmt::format("precision {}: the {} backend trains in bf16 mixed precision (fp32 "
                       "master weights); set \"precision\": \"bf16\"",
                       to_string(train.precision), name);
  }
  if (const std::string why = executor_family_violation(model); !why.empty()) {
    return fmt::format("family \"{}\": {}", model.family_name(), why);
  }
  return "";
}

std::string placement_violation(const Plan& plan, std::int64_t ranks_per_node) {
  if (plan.world_size() <= ranks_per_node || ranks_per_node % plan.tp == 0) return "";
  return fmt::format("tp = {} does not divide the {} ranks of a node: a tensor-parallel group "
                     "would span two nodes (ranks fill nodes in order)",
                     plan.tp, ranks_per_node);
}

std::string runnable_violation(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                               const ClusterSpec& cluster) {
  if (std::string why = backend_violation(backend_facts(cluster.backend), model, train, plan.tp);
      !why.empty()) {
    return why;
  }
  return placement_violation(plan, cluster.gpus_per_node);
}

}  // namespace strata
