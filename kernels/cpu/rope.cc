// RoPE forward/backward (see rope.h): OpenMP over rows when the tensor is worth a team
// (parallel.h); each position's HS/2 cosines and sines are computed once and applied to the
// rows of every sequence and all their heads. Every element's arithmetic is the same on any
// thread count.
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

// sign +1: forward rotation; -1: backward (sin negated). The B sequences share their T
// positions, so the cosines and sines are computed once per position (T x HS/2, in double as
// every RoPE angle in strata) and applied to every sequence's row and head.
void rotate(float* x, int B, int T, int heads, int HS, std::int64_t row_stride,
            int pos_offset, const RopeFrequencies& freq, float sign) {
  const int half = HS / 2;
  const std::int64_t rows = static_cast<std::int64_t>(B) * T;
  const bool team = rows * heads * HS >= kParallelMinElements;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = rope_inverse_frequency(freq, i, HS);
  std::vector<float> cos_t(static_cast<std::size_t>(T) * half), sin_t(cos_t.size());
#pragma omp parallel for schedule(static) if (team)
  for (int t = 0; t < T; ++t) {
    const double pos = static_cast<double>(pos_offset) + static_cast<double>(t);
    for (int i = 0; i < half; ++i) {
      const double angle = pos * inv_freq[i];
      cos_t[static_cast<std::size_t>(t) * half + i] = static_cast<float>(std::cos(angle));
      sin_t[static_cast<std::size_t>(t) * half + i] = sign * static_cast<float>(std::sin(angle));
    }
  }
#pragma omp parallel for schedule(static) if (team)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* c = cos_t.data() + (r % T) * half;
    const float* sn = sin_t.data() + (r % T) * half;
    float* row = x + r * row_stride;
    for (int h = 0; h < heads; ++h) {
      float* lo = row + static_cast<std::int64_t>(h) * HS;
      float* hi = lo + half;
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const float a = lo[i], b = hi[i];
        lo[i] = a * c[i] - b * sn[i];
        hi[i] = b * c[i] + a * sn[i];
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
