// LayerNorm forward/backward (see layernorm.h). Rows are independent in forward and in the
// dinp part of backward, so both run OpenMP over rows; dweight/dbias are column sums done
// per column block in row order, so no atomics and no thread-count dependence. The row and
// block bodies are compiled for baseline x86-64 and AVX-512 (isa.h); a row's statistics are
// vector reductions in double, so the two versions may differ in the last bits of a
// statistic (each is deterministic, and neither depends on the thread count).
#include "kernels/cpu/layernorm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/norm_args.h"
#include "kernels/cpu/parallel.h"

namespace strata::kernels::cpu {
namespace {

[[gnu::always_inline]] inline void forward_row_body(float* y, float* mean, float* rstd,
                                                    const float* x, const float* weight,
                                                    const float* bias, int C) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < C; ++c) sum += x[c];
  const double m = sum / C;
  double var = 0.0;  // biased variance, two-pass for accuracy
#pragma omp simd reduction(+ : var)
  for (int c = 0; c < C; ++c) {
    const double d = x[c] - m;
    var += d * d;
  }
  var /= C;
  const double s = 1.0 / std::sqrt(var + static_cast<double>(kLayerNormEps));
  const float mf = static_cast<float>(m);
  const float sf = static_cast<float>(s);
#pragma omp simd
  for (int c = 0; c < C; ++c) y[c] = (x[c] - mf) * sf * weight[c] + bias[c];
  *mean = mf;
  *rstd = sf;
}

// dx += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)), xhat = (x - mean) * rstd,
// g = dout * weight.
[[gnu::always_inline]] inline void backward_row_body(float* dx, const float* dy,
                                                     const float* x, const float* weight,
                                                     float m, float s, int C) {
  double g_mean = 0.0;
  double gx_mean = 0.0;
#pragma omp simd reduction(+ : g_mean, gx_mean)
  for (int c = 0; c < C; ++c) {
    const double g = static_cast<double>(dy[c]) * weight[c];
    g_mean += g;
    gx_mean += g * ((x[c] - m) * s);
  }
  g_mean /= C;
  gx_mean /= C;
#pragma omp simd
  for (int c = 0; c < C; ++c) {
    const double xhat = (x[c] - m) * s;
    const double g = static_cast<double>(dy[c]) * weight[c];
    dx[c] += static_cast<float>(s * (g - g_mean - xhat * gx_mean));
  }
}

// dweight[c] += sum_i dout * xhat, dbias[c] += sum_i dout over columns [c0, c1) (at most
// kColumnBlock), rows in order.
constexpr int kColumnBlock = 64;
[[gnu::always_inline]] inline void column_block_body(float* dweight, float* dbias,
                                                     const float* dout, const float* inp,
                                                     const float* mean, const float* rstd,
                                                     int BT, int C, int c0, int c1) {
  double dw[kColumnBlock] = {};
  double db[kColumnBlock] = {};
  const int n = c1 - c0;
  for (int i = 0; i < BT; ++i) {
    const std::int64_t row = static_cast<std::int64_t>(i) * C + c0;
    const float* dy = dout + row;
    const float* x = inp + row;
    const float m = mean[i];
    const float s = rstd[i];
#pragma omp simd
    for (int c = 0; c < n; ++c) {
      const double d = dy[c];
      dw[c] += d * ((x[c] - m) * s);
      db[c] += d;
    }
  }
  for (int c = 0; c < n; ++c) {
    dweight[c0 + c] += static_cast<float>(dw[c]);
    dbias[c0 + c] += static_cast<float>(db[c]);
  }
}

STRATA_TARGET_AVX512 void forward_row_avx512(float* y, float* mean, float* rstd,
                                             const float* x, const float* weight,
                                             const float* bias, int C) {
  forward_row_body(y, mean, rstd, x, weight, bias, C);
}
void forward_row_baseline(float* y, float* mean, float* rstd, const float* x,
                          const float* weight, const float* bias, int C) {
  forward_row_body(y, mean, rstd, x, weight, bias, C);
}
STRATA_TARGET_AVX512 void backward_row_avx512(float* dx, const float* dy, const float* x,
                                              const float* weight, float m, float s, int C) {
  backward_row_body(dx, dy, x, weight, m, s, C);
}
void backward_row_baseline(float* dx, const float* dy, const float* x, const float* weight,
                           float m, float s, int C) {
  backward_row_body(dx, dy, x, weight, m, s, C);
}
STRATA_TARGET_AVX512 void column_block_avx512(float* dweight, float* dbias, const float* dout,
                                              const float* inp, const float* mean,
                                              const float* rstd, int BT, int C, int c0,
                                              int c1) {
  column_block_body(dweight, dbias, dout, inp, mean, rstd, BT, C, c0, c1);
}
void column_block_baseline(float* dweight, float* dbias, const float* dout, const float* inp,
                           const float* mean, const float* rstd, int BT, int C, int c0,
                           int c1) {
  column_block_body(dweight, dbias, dout, inp, mean, rstd, BT, C, c0, c1);
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int BT, int C, Isa isa) {
  constexpr const char* kName = "layernorm_forward";
  detail::check_layernorm_forward_args(kName, out, mean, rstd, inp, weight, bias, BT, C);
  const auto row = (use_avx512(isa, kName) ? forward_row_avx512 : forward_row_baseline);
#pragma omp parallel for schedule(static) \
    if (static_cast<std::int64_t>(BT) * C >= kParallelMinElements)
  for (int i = 0; i < BT; ++i) {
    const std::int64_t at = static_cast<std::int64_t>(i) * C;
    row(out + at, mean + i, rstd + i, inp + at, weight, bias, C);
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int BT, int C, Isa isa) {
  constexpr const char* kName = "layernorm_backward";
  detail::check_layernorm_backward_args(kName, dinp, dweight, dbias, dout, inp, weight, mean,
                                        rstd, BT, C);

  const bool wide = use_avx512(isa, kName);
  const auto row = wide ? backward_row_avx512 : backward_row_baseline;
#pragma omp parallel for schedule(static) \
    if (static_cast<std::int64_t>(BT) * C >= kParallelMinElements)
  for (int i = 0; i < BT; ++i) {
    const std::int64_t at = static_cast<std::int64_t>(i) * C;
    row(dinp + at, dout + at, inp + at, weight, mean[i], rstd[i], C);
  }
  // Columns split into blocks, each summed over rows in order by one thread.
  const auto block = wide ? column_block_avx512 : column_block_baseline;
  const int blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) \
    if (static_cast<std::int64_t>(BT) * C >= kParallelMinElements)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * kColumnBlock;
    block(dweight, dbias, dout, inp, mean, rstd, BT, C, c0, std::min(C, c0 + kColumnBlock));
  }
}

}  // namespace strata::kernels::cpu
