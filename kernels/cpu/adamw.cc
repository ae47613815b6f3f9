// AdamW update and gradient sum of squares (see adamw.h).
#include "kernels/cpu/adamw.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/arg_checks.h"
#include "kernels/cpu/parallel.h"

namespace strata::kernels::cpu {
namespace {

void check_hyper(const char* kernel, const AdamWParams& hp, int step) {
  if (step < 1) {
    throw KernelError(fmt::format("{}: step = {}; expected >= 1 (bias correction uses "
                                  "1 - beta^step)", kernel, step));
  }
  if (!(hp.beta1 >= 0.0f && hp.beta1 < 1.0f) || !(hp.beta2 >= 0.0f && hp.beta2 < 1.0f)) {
    throw KernelError(fmt::format("{}: beta1 = {}, beta2 = {}; expected each in [0, 1)", kernel,
                                  hp.beta1, hp.beta2));
  }
  if (!(hp.eps > 0.0f)) {
    throw KernelError(fmt::format("{}: eps = {}; expected > 0", kernel, hp.eps));
  }
}

// The per-element update, compiled for baseline x86-64, x86-64-v3 and -v4 (isa.h); adamw.cc
// is compiled without FMA contraction, so all three give the same bits (the division and
// square root are correctly rounded in each, and nothing else differs lane by lane). With
// `copy`, the updated parameter is also written rounded to bf16 by kernels/bf16.h's
// float_to_bf16, in the same pass: the parameter is still in a register, and a second pass
// would read the parameters from memory again (4 bytes a parameter more than the 30).
struct StepConstants {
  float b1, b2, bc1, bc2, lr, eps, wd;
};
template <bool kCopy>
[[gnu::always_inline]] inline void update_span_body(float* param, const float* grad, float* m,
                                                    float* v, Bf16Bits* copy, std::int64_t n,
                                                    const StepConstants& k) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float mi = k.b1 * m[i] + (1.0f - k.b1) * g;
    const float vi = k.b2 * v[i] + (1.0f - k.b2) * g * g;
    const float mhat = mi / k.bc1;
    const float vhat = vi / k.bc2;
    m[i] = mi;
    v[i] = vi;
    const float p = param[i] - k.lr * (mhat / (std::sqrt(vhat) + k.eps) + k.wd * param[i]);
    param[i] = p;
    if constexpr (kCopy) copy[i] = float_to_bf16(p);
  }
}
[[gnu::always_inline]] inline void update_span(float* param, const float* grad, float* m,
                                               float* v, Bf16Bits* copy, std::int64_t n,
                                               const StepConstants& k) {
  if (copy == nullptr) {
    update_span_body<false>(param, grad, m, v, copy, n, k);
  } else {
    update_span_body<true>(param, grad, m, v, copy, n, k);
  }
}
STRATA_TARGET_X86_64_V4 void update_avx512(float* param, const float* grad, float* m,
                                           float* v, Bf16Bits* copy, std::int64_t n,
                                           const StepConstants& k) {
  update_span(param, grad, m, v, copy, n, k);
}
STRATA_TARGET_X86_64_V3 void update_avx2(float* param, const float* grad, float* m,
                                         float* v, Bf16Bits* copy, std::int64_t n,
                                         const StepConstants& k) {
  update_span(param, grad, m, v, copy, n, k);
}
void update_baseline(float* param, const float* grad, float* m, float* v, Bf16Bits* copy,
                     std::int64_t n, const StepConstants& k) {
  update_span(param, grad, m, v, copy, n, k);
}

// One block's sum of squares in kLanes double lanes (element i into lane i mod kLanes, each
// lane in order), the lanes then added in order: a fixed order that vectorizes on every
// ISA, so they give the same bits.
constexpr std::int64_t kSquaresBlock = 4096;
constexpr int kLanes = 8;
[[gnu::always_inline]] inline double squares_body(const float* x, std::int64_t n) {
  double lane[kLanes] = {};
  const std::int64_t whole = n - n % kLanes;
  for (std::int64_t i = 0; i < whole; i += kLanes) {
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) {
      const double e = x[i + k];
      lane[k] += e * e;
    }
  }
  for (std::int64_t i = whole; i < n; ++i) {
    const double e = x[i];
    lane[i - whole] += e * e;
  }
  double s = 0.0;
  for (double l : lane) s += l;
  return s;
}
STRATA_TARGET_AVX512 double squares_avx512(const float* x, std::int64_t n) {
  return squares_body(x, n);
}
STRATA_TARGET_AVX2 double squares_avx2(const float* x, std::int64_t n) {
  return squares_body(x, n);
}
double squares_baseline(const float* x, std::int64_t n) { return squares_body(x, n); }

}  // namespace

void adamw_update_range(float* param, const float* grad, float* m, float* v,
                        std::int64_t begin, std::int64_t end, const AdamWParams& hp,
                        int step, Isa isa, Bf16Bits* param_bf16) {
  constexpr const char* kName = "adamw_update";
  detail::require_tensor(kName, "param", param);
  detail::require_tensor(kName, "grad", grad);
  detail::require_tensor(kName, "m", m);
  detail::require_tensor(kName, "v", v);
  detail::require_non_negative(kName, "begin", begin);
  if (end < begin) {
    throw KernelError(fmt::format("{}: range [{}, {}) has end < begin", kName, begin, end));
  }
  check_hyper(kName, hp, step);
  // Per-step constants, computed once so every element (and every tile) sees the same bits.
  StepConstants k;
  k.b1 = hp.beta1;
  k.b2 = hp.beta2;
  k.bc1 = adamw_bias_correction(k.b1, step);
  k.bc2 = adamw_bias_correction(k.b2, step);
  k.lr = hp.lr;
  k.eps = hp.eps;
  k.wd = hp.weight_decay;
  const auto update =
      version_for(isa_level_for(isa, kName), update_avx512, update_avx2, update_baseline);
  parallel_spans(end - begin, [&](std::int64_t i, std::int64_t n) {
    const std::int64_t at = begin + i;
    update(param + at, grad + at, m + at, v + at,
           param_bf16 == nullptr ? nullptr : param_bf16 + at, n, k);
  });
}

void adamw_update(float* param, const float* grad, float* m, float* v, std::int64_t n,
                  const AdamWParams& hp, int step) {
  detail::require_non_negative("adamw_update", "n", n);
  adamw_update_range(param, grad, m, v, 0, n, hp, step);
}

void adamw_update(float* param, const float* grad, float* m, float* v, std::int64_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int step) {
  adamw_update(param, grad, m, v, n, AdamWParams{lr, beta1, beta2, eps, weight_decay}, step);
}

double sum_of_squares(const float* x, std::int64_t n, Isa isa) {
  detail::require_tensor("sum_of_squares", "x", x);
  detail::require_non_negative("sum_of_squares", "n", n);
  // Fixed blocks, each summed in fixed lanes, then the block sums added in order: the result
  // depends only on n, never on the thread count, the schedule or the ISA.
  const std::int64_t blocks = (n + kSquaresBlock - 1) / kSquaresBlock;
  std::vector<double> partial(static_cast<std::size_t>(blocks), 0.0);
  const auto block = version_for(isa_level_for(isa, "sum_of_squares"), squares_avx512,
                                 squares_avx2, squares_baseline);
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t i0 = b * kSquaresBlock;
    partial[static_cast<std::size_t>(b)] = block(x + i0, std::min(n, i0 + kSquaresBlock) - i0);
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

float clip_scale(double global_norm, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  if (!(global_norm >= 0.0)) {
    throw KernelError(fmt::format("clip_scale: global_norm = {}; expected a finite value >= 0",
                                  global_norm));
  }
  return static_cast<float>(std::min(1.0, max_norm / (global_norm + 1e-6)));
}

}  // namespace strata::kernels::cpu
