// Tanh-approximation GeLU forward/backward (see gelu.h).
#include "kernels/cpu/gelu.h"

#include <cmath>

#include "kernels/cpu/arg_checks.h"

namespace strata::kernels::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kCubic = 0.044715f;

}  // namespace

void gelu_forward(float* out, const float* inp, std::int64_t N) {
  detail::require_tensor("gelu_forward", "out", out);
  detail::require_tensor("gelu_forward", "inp", inp);
  detail::require_non_negative("gelu_forward", "N", N);
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < N; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + std::tanh(u));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t N) {
  detail::require_tensor("gelu_backward", "dinp", dinp);
  detail::require_tensor("gelu_backward", "inp", inp);
  detail::require_tensor("gelu_backward", "dout", dout);
  detail::require_non_negative("gelu_backward", "N", N);
  // d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx,
  // du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2), sech^2 = 1 - tanh^2.
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < N; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    const float th = std::tanh(u);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
    dinp[i] += grad * dout[i];
  }
}

}  // namespace strata::kernels::cpu
