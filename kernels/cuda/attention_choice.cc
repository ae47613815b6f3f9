// The attention path's choice (see attention_choice.h).
#include "kernels/cuda/attention_choice.h"

#include <fmt/format.h>

#include "kernels/check.h"

namespace strata::kernels::cuda {

std::optional<AttentionMode> attention_mode_from(const std::string& name) {
  if (name == "auto") return AttentionMode::kAuto;
  if (name == "cudnn") return AttentionMode::kCudnn;
  if (name == "kernels") return AttentionMode::kKernels;
  return std::nullopt;
}

std::string to_string(AttentionMode mode) {
  switch (mode) {
    case AttentionMode::kAuto: return "auto";
    case AttentionMode::kCudnn: return "cudnn";
    case AttentionMode::kKernels: return "kernels";
  }
  return "?";
}

std::string cudnn_sdpa_rejects(const AttentionShape& s, int sm, std::size_t cudnn_version,
                               bool backward) {
  if (s.B < 1 || s.T < 1 || s.NH < 1 || s.KVH < 1) {
    return fmt::format("B = {}, T = {}, NH = {}, KVH = {}: expected each >= 1", s.B, s.T, s.NH,
                       s.KVH);
  }
  if (s.HS != 64 && s.HS != 128) {
    return fmt::format("head size {}: the graphs are written for 64 and 128", s.HS);
  }
  if (s.NH % s.KVH != 0) {
    return fmt::format("{} query heads over {} KV heads: not whole groups", s.NH, s.KVH);
  }
  if (sm < 80) {
    return fmt::format("compute capability {}.{}: cuDNN's fused attention needs 8.0 or later",
                       sm / 10, sm % 10);
  }
  if (cudnn_version < 90000) {
    return fmt::format("cuDNN version {}: the graphs are written for 9.0 and later", cudnn_version);
  }
  if (backward && s.T % 128 != 0) {
    return fmt::format("sequence length {} is not a multiple of 128 (the backward graph without "
                       "a padding mask is only right then up to cuDNN 9.15)", s.T);
  }
  return "";
}

AttentionChoice choose_attention(AttentionMode mode, const std::string& cudnn_reason,
                                 std::size_t cudnn_version, const AttentionShape& s, int sm,
                                 bool backward) {
  const char* direction = backward ? "backward" : "forward";
  if (mode == AttentionMode::kKernels) {
    return {false, fmt::format("strata's attention kernels ({}: --attention kernels)", direction)};
  }
  std::string why = cudnn_reason;
  if (why.empty()) why = cudnn_sdpa_rejects(s, sm, cudnn_version, backward);
  if (why.empty()) return {true, fmt::format("cuDNN's fused attention ({})", direction)};
  if (mode == AttentionMode::kCudnn) {
    throw KernelError(
        fmt::format("--attention cudnn: cuDNN cannot run the attention {}: {}", direction, why));
  }
  return {false, fmt::format("strata's attention kernels ({}; cuDNN not used: {})", direction, why)};
}

}  // namespace strata::kernels::cuda
