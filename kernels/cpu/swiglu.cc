// SwiGLU forward/backward (see swiglu.h): rows are independent, so OpenMP over rows when the
// tensor is worth a team (parallel.h); each element's arithmetic is the same on any path.
#include "kernels/cpu/swiglu.h"

#include <cmath>
#include <cstdint>

#include "kernels/cpu/arg_checks.h"
#include "kernels/cpu/parallel.h"

namespace strata::kernels::cpu {
namespace {

// 1 / (1 + e^-a): exp overflows to inf for a < -88 and the quotient is then exactly 0.
inline float sigmoid(float a) { return 1.0f / (1.0f + std::exp(-a)); }

void check(const char* kernel, std::int64_t BT, std::int64_t F) {
  detail::require_positive(kernel, "BT", BT);
  detail::require_positive(kernel, "F", F);
}

}  // namespace

void swiglu_forward(float* out, const float* inp, std::int64_t BT, std::int64_t F) {
  constexpr const char* kName = "swiglu_forward";
  detail::require_tensor(kName, "out", out);
  detail::require_tensor(kName, "inp", inp);
  check(kName, BT, F);
#pragma omp parallel for schedule(static) if (BT * F >= kParallelMinElements)
  for (std::int64_t i = 0; i < BT; ++i) {
    const float* gate = inp + i * 2 * F;
    const float* up = gate + F;
    float* y = out + i * F;
    for (std::int64_t j = 0; j < F; ++j) y[j] = gate[j] * sigmoid(gate[j]) * up[j];
  }
}

void swiglu_backward(float* dinp, const float* inp, const float* dout, std::int64_t BT,
                     std::int64_t F) {
  constexpr const char* kName = "swiglu_backward";
  detail::require_tensor(kName, "dinp", dinp);
  detail::require_tensor(kName, "inp", inp);
  detail::require_tensor(kName, "dout", dout);
  check(kName, BT, F);
#pragma omp parallel for schedule(static) if (BT * F >= kParallelMinElements)
  for (std::int64_t i = 0; i < BT; ++i) {
    const float* gate = inp + i * 2 * F;
    const float* up = gate + F;
    const float* dy = dout + i * F;
    float* dgate = dinp + i * 2 * F;
    float* dup = dgate + F;
    for (std::int64_t j = 0; j < F; ++j) {
      const float a = gate[j];
      const float sig = sigmoid(a);
      // silu'(a) = sig + a sig (1 - sig)
      dgate[j] += dy[j] * up[j] * (sig * (1.0f + a * (1.0f - sig)));
      dup[j] += dy[j] * (a * sig);
    }
  }
}

}  // namespace strata::kernels::cpu
