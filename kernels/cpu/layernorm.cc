// LayerNorm forward/backward (see layernorm.h). Rows are independent in forward and in the
// dinp part of backward, so both run OpenMP over rows; dweight/dbias are column sums done
// per column block in row order, so no atomics and no thread-count dependence.
#include "kernels/cpu/layernorm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/arg_checks.h"
#include "kernels/cpu/parallel.h"

namespace strata::kernels::cpu {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int BT, int C) {
  constexpr const char* kName = "layernorm_forward";
  detail::require_tensor(kName, "out", out);
  detail::require_tensor(kName, "mean", mean);
  detail::require_tensor(kName, "rstd", rstd);
  detail::require_tensor(kName, "inp", inp);
  detail::require_tensor(kName, "weight", weight);
  detail::require_tensor(kName, "bias", bias);
  detail::require_positive(kName, "BT", BT);
  detail::require_positive(kName, "C", C);
#pragma omp parallel for schedule(static) \
    if (static_cast<std::int64_t>(BT) * C >= kParallelMinElements)
  for (int i = 0; i < BT; ++i) {
    const float* x = inp + static_cast<std::int64_t>(i) * C;
    float* y = out + static_cast<std::int64_t>(i) * C;
    double sum = 0.0;
    for (int c = 0; c < C; ++c) sum += x[c];
    const double m = sum / C;
    double var = 0.0;  // biased variance, two-pass for accuracy
    for (int c = 0; c < C; ++c) {
      const double d = x[c] - m;
      var += d * d;
    }
    var /= C;
    const double s = 1.0 / std::sqrt(var + static_cast<double>(kLayerNormEps));
    const float mf = static_cast<float>(m);
    const float sf = static_cast<float>(s);
    for (int c = 0; c < C; ++c) y[c] = (x[c] - mf) * sf * weight[c] + bias[c];
    mean[i] = mf;
    rstd[i] = sf;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int BT, int C) {
  constexpr const char* kName = "layernorm_backward";
  detail::require_tensor(kName, "dinp", dinp);
  detail::require_tensor(kName, "dweight", dweight);
  detail::require_tensor(kName, "dbias", dbias);
  detail::require_tensor(kName, "dout", dout);
  detail::require_tensor(kName, "inp", inp);
  detail::require_tensor(kName, "weight", weight);
  detail::require_tensor(kName, "mean", mean);
  detail::require_tensor(kName, "rstd", rstd);
  detail::require_positive(kName, "BT", BT);
  detail::require_positive(kName, "C", C);

  // dinp: with xhat = (x - mean) * rstd and g = dout * weight,
  //   dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)).
#pragma omp parallel for schedule(static) \
    if (static_cast<std::int64_t>(BT) * C >= kParallelMinElements)
  for (int i = 0; i < BT; ++i) {
    const std::int64_t row = static_cast<std::int64_t>(i) * C;
    const float* x = inp + row;
    const float* dy = dout + row;
    float* dx = dinp + row;
    const float m = mean[i];
    const float s = rstd[i];
    double g_mean = 0.0;
    double gx_mean = 0.0;
    for (int c = 0; c < C; ++c) {
      const double g = static_cast<double>(dy[c]) * weight[c];
      g_mean += g;
      gx_mean += g * ((x[c] - m) * s);
    }
    g_mean /= C;
    gx_mean /= C;
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[c] - m) * s;
      const double g = static_cast<double>(dy[c]) * weight[c];
      dx[c] += static_cast<float>(s * (g - g_mean - xhat * gx_mean));
    }
  }

  // dweight[c] += sum_i dout * xhat, dbias[c] += sum_i dout; columns split into blocks,
  // each block summed over rows in order by one thread.
  constexpr int kBlock = 64;
  const int blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) \
    if (static_cast<std::int64_t>(BT) * C >= kParallelMinElements)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * kBlock;
    const int c1 = std::min(C, c0 + kBlock);
    double dw[kBlock] = {};
    double db[kBlock] = {};
    for (int i = 0; i < BT; ++i) {
      const std::int64_t row = static_cast<std::int64_t>(i) * C;
      const float m = mean[i];
      const float s = rstd[i];
      for (int c = c0; c < c1; ++c) {
        const double dy = dout[row + c];
        dw[c - c0] += dy * ((inp[row + c] - m) * s);
        db[c - c0] += dy;
      }
    }
    for (int c = c0; c < c1; ++c) {
      dweight[c] += static_cast<float>(dw[c - c0]);
      dbias[c] += static_cast<float>(db[c - c0]);
    }
  }
}

}  // namespace strata::kernels::cpu
