// Causal multi-head attention over packed qkv (see attention.h). Forward is parallel over
// (b, t, h) rows, each writing its own probs row and output slice; backward is parallel
// over (b, h), which owns every dq/dk/dv element it touches, so neither needs atomics and
// both are deterministic. The head-size dot products use `omp simd` reductions: the lane
// order is fixed by the build, so a given binary gives the same bits on every run.
#include "kernels/cpu/attention.h"

#include <cmath>
#include <cstdint>

#include "kernels/cpu/arg_checks.h"

namespace strata::kernels::cpu {
namespace {

void check_shapes(const char* kernel, int B, int T, int C, int NH) {
  detail::require_positive(kernel, "B", B);
  detail::require_positive(kernel, "T", T);
  detail::require_positive(kernel, "C", C);
  detail::require_positive(kernel, "NH", NH);
  if (C % NH != 0) {
    throw KernelError(fmt::format("{}: C = {} is not divisible by NH = {}; expected C = NH * HS",
                                  kernel, C, NH));
  }
}

}  // namespace

void attention_forward(float* out, float* probs, const float* qkv, int B, int T, int C,
                       int NH) {
  constexpr const char* kName = "attention_forward";
  detail::require_tensor(kName, "out", out);
  detail::require_tensor(kName, "probs", probs);
  detail::require_tensor(kName, "qkv", qkv);
  check_shapes(kName, B, T, C, NH);
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const std::int64_t C3 = 3 * static_cast<std::int64_t>(C);

#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < NH; ++h) {
        const float* q = qkv + (static_cast<std::int64_t>(b) * T + t) * C3 + h * HS;
        float* p = probs + ((static_cast<std::int64_t>(b) * NH + h) * T + t) * T;
        // Scaled scores for the visible keys 0..t, and their max for a stable softmax.
        float max_score = -INFINITY;
        for (int t2 = 0; t2 <= t; ++t2) {
          const float* k = qkv + (static_cast<std::int64_t>(b) * T + t2) * C3 + C + h * HS;
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int i = 0; i < HS; ++i) dot += q[i] * k[i];
          dot *= scale;
          p[t2] = dot;
          if (dot > max_score) max_score = dot;
        }
        float sum = 0.0f;
        for (int t2 = 0; t2 <= t; ++t2) {
          p[t2] = std::exp(p[t2] - max_score);
          sum += p[t2];
        }
        const float inv_sum = 1.0f / sum;
        for (int t2 = 0; t2 <= t; ++t2) p[t2] *= inv_sum;
        for (int t2 = t + 1; t2 < T; ++t2) p[t2] = 0.0f;  // masked (future) keys

        float* o = out + (static_cast<std::int64_t>(b) * T + t) * C + h * HS;
        for (int i = 0; i < HS; ++i) o[i] = 0.0f;
        for (int t2 = 0; t2 <= t; ++t2) {
          const float* v =
              qkv + (static_cast<std::int64_t>(b) * T + t2) * C3 + 2 * C + h * HS;
          const float w = p[t2];
          for (int i = 0; i < HS; ++i) o[i] += w * v[i];
        }
      }
    }
  }
}

std::int64_t attention_backward_scratch_floats(int B, int T, int NH) {
  return static_cast<std::int64_t>(B) * NH * T;
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* probs, int B, int T, int C, int NH) {
  constexpr const char* kName = "attention_backward";
  detail::require_tensor(kName, "dqkv", dqkv);
  detail::require_tensor(kName, "scratch", scratch);
  detail::require_tensor(kName, "dout", dout);
  detail::require_tensor(kName, "qkv", qkv);
  detail::require_tensor(kName, "probs", probs);
  check_shapes(kName, B, T, C, NH);
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const std::int64_t C3 = 3 * static_cast<std::int64_t>(C);

#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      float* dp = scratch + (static_cast<std::int64_t>(b) * NH + h) * T;  // (T) dL/dprobs row
      const std::int64_t base = static_cast<std::int64_t>(b) * T * C3;
      for (int t = 0; t < T; ++t) {
        const float* p = probs + ((static_cast<std::int64_t>(b) * NH + h) * T + t) * T;
        const float* dy = dout + (static_cast<std::int64_t>(b) * T + t) * C + h * HS;
        const float* q = qkv + base + t * C3 + h * HS;
        float* dq = dqkv + base + t * C3 + h * HS;
        // out[t] = sum_t2 p[t2] v[t2]:  dp[t2] = dy . v[t2],  dv[t2] += p[t2] dy.
        float p_dot_dp = 0.0f;
        for (int t2 = 0; t2 <= t; ++t2) {
          const float* v = qkv + base + t2 * C3 + 2 * C + h * HS;
          float* dv = dqkv + base + t2 * C3 + 2 * C + h * HS;
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int i = 0; i < HS; ++i) {
            dot += dy[i] * v[i];
            dv[i] += p[t2] * dy[i];
          }
          dp[t2] = dot;
          p_dot_dp += p[t2] * dot;
        }
        // Softmax backward: dscore[t2] = p[t2] (dp[t2] - sum p dp); the score was
        // scale * q . k[t2], so dq += scale dscore k[t2] and dk[t2] += scale dscore q.
        for (int t2 = 0; t2 <= t; ++t2) {
          const float ds = p[t2] * (dp[t2] - p_dot_dp) * scale;
          const float* k = qkv + base + t2 * C3 + C + h * HS;
          float* dk = dqkv + base + t2 * C3 + C + h * HS;
          for (int i = 0; i < HS; ++i) {
            dq[i] += ds * k[i];
            dk[i] += ds * q[i];
          }
        }
      }
    }
  }
}

}  // namespace strata::kernels::cpu
