// RMSNorm forward/backward (see rmsnorm.h). As layernorm.cc: rows are independent in forward
// and in backward's dinp part, so both run OpenMP over rows; dweight is a column sum done per
// column block in row order, so no atomics and no thread-count dependence.
#include "kernels/cpu/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "kernels/cpu/norm_args.h"
#include "kernels/cpu/parallel.h"

namespace strata::kernels::cpu {
namespace {

void forward_row(float* y, float* rstd, const float* x, const float* weight, int C,
                 double eps) {
  double sum_sq = 0.0;
#pragma omp simd reduction(+ : sum_sq)
  for (int c = 0; c < C; ++c) sum_sq += static_cast<double>(x[c]) * x[c];
  const float s = static_cast<float>(1.0 / std::sqrt(sum_sq / C + eps));
  // y may alias x: each element is read before it is written.
#pragma omp simd
  for (int c = 0; c < C; ++c) y[c] = x[c] * s * weight[c];
  *rstd = s;
}

// With xhat = x * s and g = dout * weight: y = xhat * weight and d s / d x_j = -s^3 x_j / C,
// so dx_j = s * (g_j - xhat_j * mean_c(g * xhat)).
void backward_row(float* dx, const float* dy, const float* x, const float* weight, float s,
                  int C) {
  double gx_mean = 0.0;
#pragma omp simd reduction(+ : gx_mean)
  for (int c = 0; c < C; ++c) {
    gx_mean += static_cast<double>(dy[c]) * weight[c] * (static_cast<double>(x[c]) * s);
  }
  gx_mean /= C;
#pragma omp simd
  for (int c = 0; c < C; ++c) {
    const double xhat = static_cast<double>(x[c]) * s;
    const double g = static_cast<double>(dy[c]) * weight[c];
    dx[c] += static_cast<float>(s * (g - xhat * gx_mean));
  }
}

// dweight[c] += sum_i dout * xhat over columns [c0, c1) (at most kColumnBlock), rows in order.
constexpr int kColumnBlock = 64;
void column_block(float* dweight, const float* dout, const float* inp, const float* rstd,
                  int BT, int C, int c0, int c1) {
  double dw[kColumnBlock] = {};
  const int n = c1 - c0;
  for (int i = 0; i < BT; ++i) {
    const std::int64_t row = static_cast<std::int64_t>(i) * C + c0;
    const float* dy = dout + row;
    const float* x = inp + row;
    const float s = rstd[i];
#pragma omp simd
    for (int c = 0; c < n; ++c) dw[c] += static_cast<double>(dy[c]) * (x[c] * s);
  }
  for (int c = 0; c < n; ++c) dweight[c0 + c] += static_cast<float>(dw[c]);
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int BT,
                     int C, float eps) {
  constexpr const char* kName = "rmsnorm_forward";
  detail::check_rmsnorm_forward_args(kName, out, rstd, inp, weight, BT, C, eps);
#pragma omp parallel for schedule(static) \
    if (static_cast<std::int64_t>(BT) * C >= kParallelMinElements)
  for (int i = 0; i < BT; ++i) {
    const std::int64_t at = static_cast<std::int64_t>(i) * C;
    forward_row(out + at, rstd + i, inp + at, weight, C, eps);
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int BT, int C) {
  constexpr const char* kName = "rmsnorm_backward";
  detail::check_rmsnorm_backward_args(kName, dinp, dweight, dout, inp, weight, rstd, BT, C);
#pragma omp parallel for schedule(static) \
    if (static_cast<std::int64_t>(BT) * C >= kParallelMinElements)
  for (int i = 0; i < BT; ++i) {
    const std::int64_t at = static_cast<std::int64_t>(i) * C;
    backward_row(dinp + at, dout + at, inp + at, weight, rstd[i], C);
  }
  const int blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) \
    if (static_cast<std::int64_t>(BT) * C >= kParallelMinElements)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * kColumnBlock;
    column_block(dweight, dout, inp, rstd, BT, C, c0, std::min(C, c0 + kColumnBlock));
  }
}

}  // namespace strata::kernels::cpu
