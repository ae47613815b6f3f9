// The tiled attention (flash_attention.h) against a double reference and against the
// materialised kernels (attention.h): outputs, log-sum-exp and every gradient at several T
// (below, at and across the 64-row block, with a ragged last block), heads and head sizes;
// its backward against finite differences; bitwise determinism across runs and thread
// counts; accumulation; argument errors.
#include "kernels/cpu/flash_attention.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/cpu/attention.h"
#include "tests/kernels/grad_check.h"

namespace strata::kernels::cpu {
namespace {

using strata::kernels::testing::accumulated_part;
using strata::kernels::testing::gradient_matches;
using strata::kernels::testing::random_vector;
using strata::kernels::testing::weighted_sum;

// The attention and its gradients in double, each with its "absolute" twin: the same sums
// taken over absolute values (|v|, |dout|, |k|, |q| and |dp| + |D| in place of dp - D), which
// is what the rounding error of an fp32 evaluation of that sum is proportional to.
struct Reference {
  std::vector<double> out, out_abs, lse, dqkv, dqkv_abs;
  double max_abs_score = 0;  // max over (t, u) of scale * sum_i |q_i k_i|
};

Reference reference(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T,
                    int C, int NH) {
  const int HS = C / NH;
  const double scale = 1.0 / std::sqrt(double(HS));
  Reference r;
  r.out.assign(size_t(B) * T * C, 0.0);
  r.out_abs = r.out;
  r.lse.assign(size_t(B) * NH * T, 0.0);
  r.dqkv.assign(qkv.size(), 0.0);
  r.dqkv_abs = r.dqkv;
  const auto qi = [&](int b, int t, int part, int h, int i) {
    return size_t((b * T + t) * 3 + part) * C + h * HS + i;
  };
  const auto oi = [&](int b, int t, int h, int i) { return size_t(b * T + t) * C + h * HS + i; };
  std::vector<double> p(size_t(T) * T), dp(size_t(T) * T), dpa(size_t(T) * T);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        double mx = -INFINITY;
        for (int u = 0; u <= t; ++u) {
          double s = 0, sa = 0;
          for (int i = 0; i < HS; ++i) {
            s += double(qkv[qi(b, t, 0, h, i)]) * qkv[qi(b, u, 1, h, i)];
            sa += std::fabs(double(qkv[qi(b, t, 0, h, i)]) * qkv[qi(b, u, 1, h, i)]);
          }
          p[t * T + u] = s * scale;
          r.max_abs_score = std::max(r.max_abs_score, sa * scale);
          mx = std::max(mx, s * scale);
        }
        double z = 0;
        for (int u = 0; u <= t; ++u) z += std::exp(p[t * T + u] - mx);
        const double lse = mx + std::log(z);
        r.lse[(size_t(b) * NH + h) * T + t] = lse;
        for (int u = 0; u <= t; ++u) p[t * T + u] = std::exp(p[t * T + u] - lse);
        for (int u = 0; u <= t; ++u) {
          for (int i = 0; i < HS; ++i) {
            r.out[oi(b, t, h, i)] += p[t * T + u] * qkv[qi(b, u, 2, h, i)];
            r.out_abs[oi(b, t, h, i)] += p[t * T + u] * std::fabs(qkv[qi(b, u, 2, h, i)]);
          }
        }
      }
      for (int t = 0; t < T; ++t) {
        double D = 0, Da = 0;
        for (int u = 0; u <= t; ++u) {
          double d = 0, da = 0;
          for (int i = 0; i < HS; ++i) {
            d += double(dout[oi(b, t, h, i)]) * qkv[qi(b, u, 2, h, i)];
            da += std::fabs(double(dout[oi(b, t, h, i)]) * qkv[qi(b, u, 2, h, i)]);
          }
          dp[t * T + u] = d;
          dpa[t * T + u] = da;
          D += p[t * T + u] * d;
          Da += p[t * T + u] * da;
        }
        for (int u = 0; u <= t; ++u) {
          const double pu = p[t * T + u];
          const double ds = pu * (dp[t * T + u] - D) * scale;
          const double dsa = pu * (dpa[t * T + u] + Da) * scale;
          for (int i = 0; i < HS; ++i) {
            r.dqkv[qi(b, t, 0, h, i)] += ds * qkv[qi(b, u, 1, h, i)];
            r.dqkv_abs[qi(b, t, 0, h, i)] += dsa * std::fabs(qkv[qi(b, u, 1, h, i)]);
            r.dqkv[qi(b, u, 1, h, i)] += ds * qkv[qi(b, t, 0, h, i)];
            r.dqkv_abs[qi(b, u, 1, h, i)] += dsa * std::fabs(qkv[qi(b, t, 0, h, i)]);
            r.dqkv[qi(b, u, 2, h, i)] += pu * dout[oi(b, t, h, i)];
            r.dqkv_abs[qi(b, u, 2, h, i)] += pu * std::fabs(dout[oi(b, t, h, i)]);
          }
        }
      }
    }
  }
  return r;
}

// The rounding-error bound of an fp32 attention (either kernel) against the exact result, per
// element: |got - exact| <= kappa * abs, abs the element's absolute twin above. With
// u = 2^-24 and gamma_n = n u / (1 - n u) (Higham's bound for an n-term sum or dot product,
// whatever the order, so it covers BLAS's blocking as well as a sequential loop):
//  - a score s = scale q.k is off by at most gamma_HS * S_abs (S_abs = max_abs_score);
//  - a probability p = exp(s - lse) is then off by a relative e_p <= 2 gamma_HS S_abs (its
//    score and, through lse, every score) + gamma_T (the normaliser's T-term sum) + (2 +
//    T / 64) e_exp (its own exp, the normaliser's, and the online softmax's rescale factors,
//    one per key block; e_exp = 1.5e-7 covers fast_expf and libm's expf alike);
//  - out, dp, D, dv are sums of <= T products and dq, dk sums of <= T products of sums of HS
//    products, each adding at most gamma_{T+HS} of its absolute twin; three such levels
//    (dp or D, ds, dq or dk) on top of e_p.
// Hence kappa = e_p + 3 gamma_{T+HS}, doubled because the bound is first order.
double kappa(int T, int HS, double max_abs_score) {
  const double u = std::ldexp(1.0, -24);
  const auto gamma = [u](double n) { return n * u / (1.0 - n * u); };
  const double e_exp = 1.5e-7;
  const double e_p = 2 * gamma(HS) * max_abs_score + gamma(T) + (2.0 + T / 64.0) * e_exp;
  return 2.0 * (e_p + 3 * gamma(T + HS));
}

// |got[i] - ref[i]| <= k * abs[i] + 1e-30 for every i; names the worst element.
::testing::AssertionResult within(const std::string& what, const std::vector<float>& got,
                                  const std::vector<double>& ref,
                                  const std::vector<double>& abs, double k) {
  double worst_ratio = 0;
  size_t worst = 0, failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = k * abs[i] + 1e-30;
    const double ratio = std::fabs(got[i] - ref[i]) / tol;
    if (!(ratio <= 1.0)) ++failures;
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  std::ostringstream msg;
  msg << what << ": worst [" << worst << "] got " << got[worst] << " ref " << ref[worst]
      << " bound " << k * abs[worst] << " (error / bound = " << worst_ratio << ")";
  if (failures == 0) return ::testing::AssertionSuccess() << msg.str();
  return ::testing::AssertionFailure() << msg.str() << ", " << failures << " elements fail";
}

struct Case {
  int B, T, C, NH;
};

// T below a 64-row query block, exactly one, one row past it, ragged over several; exactly
// one 128-column key block, one past it, several with a ragged last (the online softmax's
// rescaling); HS 4 to 128: below, at and past tile_gemm's 16-float vectors and 64-column
// chunks, and the benchmark's 64 at a T that is no multiple of either block (300).
const Case kCases[] = {{2, 1, 8, 2},    {2, 5, 8, 2},    {1, 64, 16, 2},  {2, 65, 24, 3},
                       {1, 130, 64, 2}, {1, 200, 32, 1}, {1, 77, 256, 2}, {1, 256, 16, 2},
                       {2, 257, 8, 1},  {1, 600, 32, 2}, {2, 300, 128, 2}, {1, 129, 40, 2}};

class FlashAttention : public ::testing::TestWithParam<Case> {};

TEST_P(FlashAttention, ForwardAndGradientsMatchDoubleReferenceAndMaterialisedKernels) {
  const auto [B, T, C, NH] = GetParam();
  const int HS = C / NH;
  const auto qkv = random_vector(size_t(B) * T * 3 * C, 1000 + T, -2.0f, 2.0f);
  const auto dout = random_vector(size_t(B) * T * C, 2000 + T);
  const Reference ref = reference(qkv, dout, B, T, C, NH);
  const double k = kappa(T, HS, ref.max_abs_score);

  std::vector<float> out(size_t(B) * T * C, NAN), lse(size_t(B) * NH * T, NAN);
  flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  std::vector<float> dqkv(qkv.size(), 0.0f);
  std::vector<float> scratch(flash_attention_backward_scratch_floats(B, T, NH), NAN);
  flash_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(),
                           lse.data(), B, T, C, NH);

  std::vector<float> old_out(out.size()), probs(size_t(B) * NH * T * T);
  attention_forward(old_out.data(), probs.data(), qkv.data(), B, T, C, NH);
  std::vector<float> old_dqkv(qkv.size(), 0.0f);
  std::vector<float> old_scratch(attention_backward_scratch_floats(B, T, NH));
  attention_backward(old_dqkv.data(), old_scratch.data(), dout.data(), qkv.data(), probs.data(),
                     B, T, C, NH);

  EXPECT_TRUE(within("out vs double", out, ref.out, ref.out_abs, k));
  EXPECT_TRUE(within("dqkv vs double", dqkv, ref.dqkv, ref.dqkv_abs, k));
  // Both kernels are within kappa of the exact values, hence within 2 kappa of each other.
  std::vector<double> old_out_d(old_out.begin(), old_out.end());
  std::vector<double> old_dqkv_d(old_dqkv.begin(), old_dqkv.end());
  EXPECT_TRUE(within("out vs materialised", out, old_out_d, ref.out_abs, 2 * k));
  EXPECT_TRUE(within("dqkv vs materialised", dqkv, old_dqkv_d, ref.dqkv_abs, 2 * k));
  // lse = max + log(sum): the max is exact up to its score's error (gamma_HS S_abs), the log
  // of a sum with relative error e_p adds e_p absolutely; |lse| <= S_abs + log T.
  std::vector<double> lse_abs(lse.size(), 1.0);
  EXPECT_TRUE(within("lse vs double", lse, ref.lse, lse_abs,
                     k * (1.0 + ref.max_abs_score + std::log(double(T)))));
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashAttention, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return "B" + std::to_string(c.B) + "_T" + std::to_string(c.T) +
                                  "_C" + std::to_string(c.C) + "_NH" + std::to_string(c.NH);
                         });

TEST(FlashAttentionGrad, BackwardMatchesFiniteDifferencesAcrossABlockEdgeAndAccumulates) {
  // T = 260: four full 64-row query blocks and a ragged one, two full 128-column key blocks
  // and a ragged one, so unmasked tiles, the diagonal's masked ones and the online softmax's
  // rescale are all in the loss.
  const int B = 1, T = 260, C = 4, NH = 2;
  auto qkv = random_vector(size_t(B) * T * 3 * C, 301);
  const auto lw = random_vector(size_t(B) * T * C, 302);
  std::vector<float> out(size_t(B) * T * C), lse(size_t(B) * NH * T);
  flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  const auto d0 = random_vector(qkv.size(), 303, -0.1f, 0.1f);
  auto dqkv = d0;
  std::vector<float> scratch(flash_attention_backward_scratch_floats(B, T, NH));
  flash_attention_backward(dqkv.data(), scratch.data(), lw.data(), qkv.data(), out.data(),
                           lse.data(), B, T, C, NH);
  auto loss = [&] {
    flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
    return weighted_sum(out, lw);
  };
  // h = 1e-3 on unit inputs: truncation O(h^2) ~ 1e-6; fp32 forward noise: the loss sums
  // T C = 1040 terms |lw out| <= 1 each, so |L| ~ sqrt(1040) ~ 30 typically, its rounding
  // ~ 1e-7 |L| ~ 3e-6, over 2h = 2e-3: ~1.5e-3. atol 4e-3, rtol 1e-2 (attention_test's
  // rtol, atol scaled to this loss's size).
  EXPECT_TRUE(gradient_matches("dqkv", qkv, accumulated_part(dqkv, d0), loss, 1e-3, 4e-3, 1e-2));
}

TEST(FlashAttentionGrad, BitwiseDeterministicAcrossRunsAndThreadCounts) {
  // 23 MFLOP forward, 58 backward: enough work for threads_for to use every thread offered.
  const int B = 2, T = 300, C = 64, NH = 4;
  const auto qkv = random_vector(size_t(B) * T * 3 * C, 401);
  const auto dout = random_vector(size_t(B) * T * C, 402);
  const auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> out(size_t(B) * T * C), lse(size_t(B) * NH * T);
    flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
    std::vector<float> dqkv(qkv.size(), 0.0f);
    std::vector<float> scratch(flash_attention_backward_scratch_floats(B, T, NH));
    flash_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(),
                             lse.data(), B, T, C, NH);
    omp_set_num_threads(saved);
    out.insert(out.end(), lse.begin(), lse.end());
    out.insert(out.end(), dqkv.begin(), dqkv.end());
    return out;
  };
  const auto one = run(1);
  EXPECT_EQ(one, run(1));
  EXPECT_EQ(one, run(2));
  EXPECT_EQ(one, run(3));
}

TEST(FlashAttentionGrad, BadArgumentsThrowKernelError) {
  std::vector<float> buf(1024, 0.0f);
  // C = 6 is not divisible by NH = 4.
  EXPECT_THROW(flash_attention_forward(buf.data(), buf.data(), buf.data(), 1, 2, 6, 4),
               KernelError);
  EXPECT_THROW(flash_attention_forward(buf.data(), nullptr, buf.data(), 1, 2, 4, 2),
               KernelError);
  EXPECT_THROW(flash_attention_backward(buf.data(), buf.data(), buf.data(), buf.data(), nullptr,
                                        buf.data(), 1, 2, 4, 2),
               KernelError);
  EXPECT_THROW(flash_attention_backward(buf.data(), buf.data(), buf.data(), buf.data(),
                                        buf.data(), buf.data(), 1, 0, 4, 2),
               KernelError);
}

}  // namespace
}  // namespace strata::kernels::cpu
