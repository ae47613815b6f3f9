// The out-of-memory advice; see memory_advice.h.
#include "tools/strata/memory_advice.h"

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "cost_model/specs/units.h"
#include "tools/strata/inputs.h"

namespace strata::cli {
namespace {

// The plan changes that shrink `kind` on the device, cheapest first; only those this plan
// can still make (a ZeRO stage it has not reached, a data-parallel group to partition over).
std::vector<std::string> remedies(MemoryKind kind, const Plan& plan) {
  std::vector<std::string> out;
  const bool dp = plan.dp > 1;
  switch (kind) {
    case MemoryKind::kParams:
      if (dp && plan.zero_stage < 3) out.push_back("zero_stage 3 (parameters partitioned over d)");
      out.push_back("more tensor or pipeline parallelism (t or p)");
      if (plan.zero_stage == 3 && plan.offload.params == OffloadTier::kNone) {
        out.push_back("offload.params cpu or nvme");
      }
      break;
    case MemoryKind::kGradients:
      if (dp && plan.zero_stage < 2) out.push_back("zero_stage 2 (gradients partitioned over d)");
      if (plan.zero_stage >= 2 && plan.offload.gradients == OffloadTier::kNone) {
        out.push_back("offload.gradients cpu");
      }
      out.push_back("more tensor or pipeline parallelism (t or p)");
      break;
    case MemoryKind::kOptimizer:
      if (dp && plan.zero_stage < 1) out.push_back("zero_stage 1 (optimizer state partitioned over d)");
      if (plan.offload.optimizer == OffloadTier::kNone) out.push_back("offload.optimizer cpu or nvme");
      out.push_back("more tensor or pipeline parallelism (t or p)");
      break;
    case MemoryKind::kActivations:
      if (plan.recompute == Recompute::kNone) out.push_back("recompute selective (or full)");
      if (plan.recompute == Recompute::kSelective) out.push_back("recompute full");
      if (plan.micro_batch > 1) out.push_back(fmt::format("micro_batch {}", plan.micro_batch / 2));
      if (plan.tp > 1 && !plan.sequence_parallel) out.push_back("sequence_parallel true");
      out.push_back("more tensor or pipeline parallelism (t or p)");
      break;
    case MemoryKind::kBuffers:
      if (plan.micro_batch > 1) out.push_back(fmt::format("micro_batch {}", plan.micro_batch / 2));
      out.push_back("more tensor parallelism (t)");
      break;
    case MemoryKind::kHeadroom:
      out.push_back("a profile that measured this GPU's headroom (`strata calibrate --backend cuda`)");
      break;
  }
  return out;
}

}  // namespace

std::string memory_advice(const RankMemory& worst, const Plan& plan, const ClusterSpec& cluster) {
  if (!worst.by_kind) return "";
  const MemoryByKind& kinds = *worst.by_kind;
  const MemoryKind largest = kinds.largest_on_device();
  const double bytes = kinds[largest].device;
  std::string text = fmt::format(
      "the largest kind on the device is {}, {} of {} ({})", describe(largest), bytes_label(bytes),
      bytes_label(worst.peak_bytes.device),
      percent(worst.peak_bytes.device > 0 ? bytes / worst.peak_bytes.device : 0));
  if (largest == MemoryKind::kActivations && worst.in_flight > 0) {
    text += fmt::format(", {} chunk-micro-{} in flight", worst.in_flight,
                        worst.in_flight == 1 ? "batch" : "batches");
  }
  const std::vector<std::string> changes = remedies(largest, plan);
  if (!changes.empty()) {
    text += "; to shrink it: ";
    for (std::size_t i = 0; i < changes.size(); ++i) text += (i == 0 ? "" : ", ") + changes[i];
  }
  if (cluster.backend == Backend::kCpu) {
    // The CPU backend's device tier is host memory under a budget the run may raise.
    text += fmt::format("; on the CPU backend, or run with --device-budget-mib {:.0f}",
                        std::ceil(worst.peak_bytes.device / units::kMiB));
  }
  return text;
}

}  // namespace strata::cli
