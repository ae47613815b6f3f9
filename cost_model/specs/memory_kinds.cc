// Memory kinds' names and the allocation tags' kinds; see memory_kinds.h.
#include "cost_model/specs/memory_kinds.h"

#include <stdexcept>

namespace strata {

std::string_view to_string(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kParams: return "params";
    case MemoryKind::kGradients: return "gradients";
    case MemoryKind::kOptimizer: return "optimizer";
    case MemoryKind::kActivations: return "activations";
    case MemoryKind::kBuffers: return "buffers";
    case MemoryKind::kHeadroom: return "headroom";
  }
  throw std::logic_error("memory kind out of range");
}

std::string_view describe(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kParams: return "parameters";
    case MemoryKind::kGradients: return "gradients";
    case MemoryKind::kOptimizer: return "optimizer state";
    case MemoryKind::kActivations: return "activations";
    case MemoryKind::kBuffers: return "buffers";
    case MemoryKind::kHeadroom: return "reserved headroom";
  }
  throw std::logic_error("memory kind out of range");
}

MemoryKind memory_kind_of_tag(std::string_view tag, std::string_view tier) {
  // executor/engine/model_state.cc names the state "params" (and "master"), "gradients",
  // "optimizer" where the device holds it and "offload:<kind>" where host or NVMe does.
  constexpr std::string_view kOffload = "offload:";
  const std::string_view state = tag.substr(0, kOffload.size()) == kOffload ? tag.substr(kOffload.size()) : tag;
  // "master": the fp32 master parameters a bf16 run keeps beside its bf16 ones.
  if (state == "params" || state == "master") return MemoryKind::kParams;
  if (state == "gradients") return MemoryKind::kGradients;
  if (state == "optimizer") return MemoryKind::kOptimizer;
  return tier == "device" ? MemoryKind::kActivations : MemoryKind::kBuffers;
}

}  // namespace strata
