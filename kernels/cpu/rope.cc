// RoPE forward/backward (see rope.h): OpenMP over rows when the tensor is worth a team
// (parallel.h); each row computes its HS/2 cosines and sines once and applies them to all its
// heads. Every element's arithmetic is the same on any thread count.
#include "kernels/cpu/rope.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/arg_checks.h"
#include "kernels/cpu/parallel.h"

namespace strata::kernels::cpu {
namespace {

void check(const char* kernel, const float* x, int B, int T, int heads, int HS,
           std::int64_t row_stride, int pos_offset, const RopeFrequencies& freq) {
  detail::require_tensor(kernel, "x", x);
  detail::require_positive(kernel, "B", B);
  detail::require_positive(kernel, "T", T);
  detail::require_positive(kernel, "heads", heads);
  detail::require_positive(kernel, "HS", HS);
  detail::require_non_negative(kernel, "pos_offset", pos_offset);
  if (HS % 2 != 0) {
    throw KernelError(fmt::format("{}: HS = {}; expected an even head size (dims pair as i, "
                                  "i + HS/2)",
                                  kernel, HS));
  }
  if (row_stride < static_cast<std::int64_t>(heads) * HS) {
    throw KernelError(fmt::format("{}: row_stride = {}; expected >= heads * HS = {}", kernel,
                                  row_stride, static_cast<std::int64_t>(heads) * HS));
  }
  if (const std::string why = rope_frequencies_violation(freq); !why.empty()) {
    throw KernelError(fmt::format("{}: {}", kernel, why));
  }
}

// sign +1: forward rotation; -1: backward (sin negated).
void rotate(float* x, int B, int T, int heads, int HS, std::int64_t row_stride,
            int pos_offset, const RopeFrequencies& freq, float sign) {
  const int half = HS / 2;
  const std::int64_t rows = static_cast<std::int64_t>(B) * T;
  std::vector<double> inv_freq(half);  // the same for every row: computed once
  for (int i = 0; i < half; ++i) inv_freq[i] = rope_inverse_frequency(freq, i, HS);
#pragma omp parallel if (rows * heads * HS >= kParallelMinElements)
  {
    std::vector<float> cos_t(half), sin_t(half);  // this thread's, reused across its rows
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const double pos = static_cast<double>(pos_offset) + static_cast<double>(r % T);
      for (int i = 0; i < half; ++i) {
        const double angle = pos * inv_freq[i];
        cos_t[i] = static_cast<float>(std::cos(angle));
        sin_t[i] = sign * static_cast<float>(std::sin(angle));
      }
      float* row = x + r * row_stride;
      for (int h = 0; h < heads; ++h) {
        float* lo = row + static_cast<std::int64_t>(h) * HS;
        float* hi = lo + half;
#pragma omp simd
        for (int i = 0; i < half; ++i) {
          const float a = lo[i], b = hi[i];
          lo[i] = a * cos_t[i] - b * sin_t[i];
          hi[i] = b * cos_t[i] + a * sin_t[i];
        }
      }
    }
  }
}

}  // namespace

void rope_forward(float* x, int B, int T, int heads, int HS, std::int64_t row_stride,
                  int pos_offset, const RopeFrequencies& freq) {
  check("rope_forward", x, B, T, heads, HS, row_stride, pos_offset, freq);
  rotate(x, B, T, heads, HS, row_stride, pos_offset, freq, 1.0f);
}

void rope_backward(float* dx, int B, int T, int heads, int HS, std::int64_t row_stride,
                   int pos_offset, const RopeFrequencies& freq) {
  check("rope_backward", dx, B, T, heads, HS, row_stride, pos_offset, freq);
  rotate(dx, B, T, heads, HS, row_stride, pos_offset, freq, -1.0f);
}

}  // namespace strata::kernels::cpu
