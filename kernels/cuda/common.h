// Shared by the CUDA launchers' headers: the bf16 storage type and the argument checks that
// run on the host BEFORE any CUDA call (so a bad shape throws KernelError even on a machine
// without a GPU, and never leaves a half-launched op behind).
// It deliberately holds no device code (see device_utils.cuh) and reuses the CPU kernels'
// checks (kernels/cpu/arg_checks.h) so both backends word their errors the same way.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <fmt/format.h>

#include "kernels/check.h"
#include "kernels/cpu/arg_checks.h"

namespace strata::kernels::cuda {

// Activations, weights' compute copies and activation gradients are bf16 (8-bit mantissa);
// master weights, optimizer state, parameter gradients and all statistics are fp32.
using bf16 = __nv_bfloat16;

namespace detail {

using cpu::detail::require_non_negative;
using cpu::detail::require_positive;
using cpu::detail::require_tensor;

// `value` must be a multiple of `multiple` (vectorised loads, cuBLASLt aux strides).
inline void require_multiple(const char* kernel, const char* name, std::int64_t value,
                             std::int64_t multiple) {
  if (value % multiple != 0) {
    throw KernelError(
        fmt::format("{}: {} = {}; expected a multiple of {}", kernel, name, value, multiple));
  }
}

// `value` must be one of the sizes a kernel was compiled for.
inline void require_one_of(const char* kernel, const char* name, std::int64_t value,
                           std::int64_t a, std::int64_t b) {
  if (value != a && value != b) {
    throw KernelError(
        fmt::format("{}: {} = {}; expected {} or {}", kernel, name, value, a, b));
  }
}

}  // namespace detail
}  // namespace strata::kernels::cuda
