// Flat elementwise helpers (see elementwise.h).
#include "kernels/cpu/elementwise.h"

#include <cstdint>

#include "kernels/cpu/arg_checks.h"

namespace strata::kernels::cpu {

void residual_forward(float* out, const float* a, const float* b, std::int64_t N) {
  detail::require_tensor("residual_forward", "out", out);
  detail::require_tensor("residual_forward", "a", a);
  detail::require_tensor("residual_forward", "b", b);
  detail::require_non_negative("residual_forward", "N", N);
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < N; ++i) out[i] = a[i] + b[i];
}

void accumulate(float* dst, const float* src, std::int64_t N) {
  detail::require_tensor("accumulate", "dst", dst);
  detail::require_tensor("accumulate", "src", src);
  detail::require_non_negative("accumulate", "N", N);
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < N; ++i) dst[i] += src[i];
}

void scale(float* x, std::int64_t N, float s) {
  detail::require_tensor("scale", "x", x);
  detail::require_non_negative("scale", "N", N);
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < N; ++i) x[i] *= s;
}

void zero(float* x, std::int64_t N) {
  detail::require_tensor("zero", "x", x);
  detail::require_non_negative("zero", "N", N);
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < N; ++i) x[i] = 0.0f;
}

void copy(float* dst, const float* src, std::int64_t N) {
  detail::require_tensor("copy", "dst", dst);
  detail::require_tensor("copy", "src", src);
  detail::require_non_negative("copy", "N", N);
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < N; ++i) dst[i] = src[i];
}

void add_bias(float* out, const float* bias, int rows, int cols) {
  detail::require_tensor("add_bias", "out", out);
  detail::require_tensor("add_bias", "bias", bias);
  detail::require_non_negative("add_bias", "rows", rows);
  detail::require_non_negative("add_bias", "cols", cols);
#pragma omp parallel for
  for (int r = 0; r < rows; ++r) {
    float* row = out + static_cast<std::int64_t>(r) * cols;
    for (int c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

}  // namespace strata::kernels::cpu
