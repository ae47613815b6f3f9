// Flat elementwise helpers (see elementwise.h).
#include "kernels/cpu/elementwise.h"

#include <cstdint>

#include "kernels/cpu/arg_checks.h"
#include "kernels/cpu/parallel.h"

namespace strata::kernels::cpu {

void residual_forward(float* out, const float* a, const float* b, std::int64_t N) {
  detail::require_tensor("residual_forward", "out", out);
  detail::require_tensor("residual_forward", "a", a);
  detail::require_tensor("residual_forward", "b", b);
  detail::require_non_negative("residual_forward", "N", N);
#pragma omp parallel for simd schedule(static) if (N >= kParallelMinElements)
  for (std::int64_t i = 0; i < N; ++i) out[i] = a[i] + b[i];
}

void accumulate(float* dst, const float* src, std::int64_t N) {
  detail::require_tensor("accumulate", "dst", dst);
  detail::require_tensor("accumulate", "src", src);
  detail::require_non_negative("accumulate", "N", N);
#pragma omp parallel for simd schedule(static) if (N >= kParallelMinElements)
  for (std::int64_t i = 0; i < N; ++i) dst[i] += src[i];
}

void scale(float* x, std::int64_t N, float s) {
  detail::require_tensor("scale", "x", x);
  detail::require_non_negative("scale", "N", N);
#pragma omp parallel for simd schedule(static) if (N >= kParallelMinElements)
  for (std::int64_t i = 0; i < N; ++i) x[i] *= s;
}

void zero(float* x, std::int64_t N) {
  detail::require_tensor("zero", "x", x);
  detail::require_non_negative("zero", "N", N);
#pragma omp parallel for simd schedule(static) if (N >= kParallelMinElements)
  for (std::int64_t i = 0; i < N; ++i) x[i] = 0.0f;
}

void copy(float* dst, const float* src, std::int64_t N) {
  detail::require_tensor("copy", "dst", dst);
  detail::require_tensor("copy", "src", src);
  detail::require_non_negative("copy", "N", N);
#pragma omp parallel for simd schedule(static) if (N >= kParallelMinElements)
  for (std::int64_t i = 0; i < N; ++i) dst[i] = src[i];
}

void add_bias(float* out, const float* bias, int rows, int cols) {
  detail::require_tensor("add_bias", "out", out);
  detail::require_tensor("add_bias", "bias", bias);
  detail::require_non_negative("add_bias", "rows", rows);
  detail::require_non_negative("add_bias", "cols", cols);
#pragma omp parallel for schedule(static) \
    if (static_cast<std::int64_t>(rows) * cols >= kParallelMinElements)
  for (int r = 0; r < rows; ++r) {
    float* row = out + static_cast<std::int64_t>(r) * cols;
    for (int c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

void bias_residual_forward(float* out, const float* y, const float* bias, const float* residual,
                           int rows, int cols) {
  detail::require_tensor("bias_residual_forward", "out", out);
  detail::require_tensor("bias_residual_forward", "y", y);
  detail::require_tensor("bias_residual_forward", "residual", residual);
  detail::require_non_negative("bias_residual_forward", "rows", rows);
  detail::require_non_negative("bias_residual_forward", "cols", cols);
  // (y + bias) + residual per element: the rounding of copy, add_bias, residual_forward in
  // turn, in one pass and one parallel region.
#pragma omp parallel for schedule(static) \
    if (static_cast<std::int64_t>(rows) * cols >= kParallelMinElements)
  for (int r = 0; r < rows; ++r) {
    const std::int64_t o = static_cast<std::int64_t>(r) * cols;
    if (bias != nullptr) {
#pragma omp simd
      for (int c = 0; c < cols; ++c) out[o + c] = (y[o + c] + bias[c]) + residual[o + c];
    } else {
#pragma omp simd
      for (int c = 0; c < cols; ++c) out[o + c] = y[o + c] + residual[o + c];
    }
  }
}

}  // namespace strata::kernels::cpu
