// Argument checks shared by the CPU kernels' .cc files (not part of the public API): each
// throws KernelError naming the kernel, the argument, the value and what was expected.
// It deliberately checks only what a kernel can see (nulls, signs, divisibility), not
// buffer lengths, which raw pointers do not carry.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>

#include <fmt/format.h>

#include "kernels/check.h"

namespace strata::kernels::cpu::detail {

inline void require_tensor(const char* kernel, const char* name, const void* p) {
  if (p == nullptr) {
    throw KernelError(fmt::format("{}: tensor '{}' is null; expected a buffer", kernel, name));
  }
}

// Each named tensor, in order.
inline void require_tensors(
    const char* kernel, std::initializer_list<std::pair<const char*, const void*>> tensors) {
  for (const auto& [name, p] : tensors) require_tensor(kernel, name, p);
}

inline void require_positive(const char* kernel, const char* name, std::int64_t value) {
  if (value <= 0) {
    throw KernelError(fmt::format("{}: {} = {}; expected > 0", kernel, name, value));
  }
}

inline void require_non_negative(const char* kernel, const char* name, std::int64_t value) {
  if (value < 0) {
    throw KernelError(fmt::format("{}: {} = {}; expected >= 0", kernel, name, value));
  }
}

}  // namespace strata::kernels::cpu::detail
