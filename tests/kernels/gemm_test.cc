// matmul_forward / matmul_backward / sgemm against a naive triple loop in double and against
// finite differences; argument errors throw KernelError.
#include "kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "kernels/check.h"
#include "tests/kernels/grad_check.h"

namespace strata::kernels::cpu {
namespace {

using strata::kernels::testing::accumulated_part;
using strata::kernels::testing::all_close;
using strata::kernels::testing::gradient_matches;
using strata::kernels::testing::random_vector;
using strata::kernels::testing::weighted_sum;

// out[i][o] = sum_c inp[i][c] * weight[o][c] + bias[o], in double.
std::vector<double> naive_linear(const std::vector<float>& inp, const std::vector<float>& w,
                                 const float* bias, int BT, int C, int OC) {
  std::vector<double> out(static_cast<size_t>(BT) * OC);
  for (int i = 0; i < BT; ++i)
    for (int o = 0; o < OC; ++o) {
      double s = bias ? bias[o] : 0.0;
      for (int c = 0; c < C; ++c) s += double{inp[i * C + c]} * w[o * C + c];
      out[i * OC + o] = s;
    }
  return out;
}

TEST(Matmul, ForwardMatchesNaiveLoopWithAndWithoutBias) {
  const int BT = 7, C = 13, OC = 5;  // odd sizes: no tile-multiple luck
  auto inp = random_vector(BT * C, 1);
  auto w = random_vector(OC * C, 2);
  auto bias = random_vector(OC, 3);
  std::vector<float> out(BT * OC, 99.0f);  // garbage: forward must overwrite
  matmul_forward(out.data(), inp.data(), w.data(), bias.data(), BT, C, OC);
  // Tolerance: 13-term fp32 dot products of values < 1, error ~ 13 * 6e-8; 1e-5 is ample.
  EXPECT_TRUE(all_close("out with bias", out, naive_linear(inp, w, bias.data(), BT, C, OC),
                        1e-5, 1e-5));
  matmul_forward(out.data(), inp.data(), w.data(), nullptr, BT, C, OC);
  EXPECT_TRUE(all_close("out without bias", out, naive_linear(inp, w, nullptr, BT, C, OC),
                        1e-5, 1e-5));
}

TEST(Matmul, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int BT = 4, C = 6, OC = 3;
  auto inp = random_vector(BT * C, 11);
  auto w = random_vector(OC * C, 12);
  auto bias = random_vector(OC, 13);
  auto lw = random_vector(BT * OC, 14);  // loss = sum(out * lw), so dout = lw
  // Prefilled grads: backward must add on top of them.
  auto dinp0 = random_vector(BT * C, 15, -0.1f, 0.1f);
  auto dw0 = random_vector(OC * C, 16, -0.1f, 0.1f);
  auto db0 = random_vector(OC, 17, -0.1f, 0.1f);
  auto dinp = dinp0, dw = dw0, db = db0;
  matmul_backward(dinp.data(), dw.data(), db.data(), lw.data(), inp.data(), w.data(), BT, C,
                  OC);

  std::vector<float> out(BT * OC);
  auto loss = [&] {
    matmul_forward(out.data(), inp.data(), w.data(), bias.data(), BT, C, OC);
    return weighted_sum(out, lw);
  };
  // The loss is linear in each input, so central differences are exact up to fp32 rounding of
  // the forward (~1e-7 relative on a loss of order 1, divided by 2h = 2e-2): atol 1e-4.
  EXPECT_TRUE(gradient_matches("dinp", inp, accumulated_part(dinp, dinp0), loss, 1e-2, 1e-4,
                               1e-3));
  EXPECT_TRUE(gradient_matches("dweight", w, accumulated_part(dw, dw0), loss, 1e-2, 1e-4, 1e-3));
  EXPECT_TRUE(gradient_matches("dbias", bias, accumulated_part(db, db0), loss, 1e-2, 1e-4,
                               1e-3));
}

// kOverwrite: dinp = dout @ weight whatever dinp held (NaN included: beta = 0 never reads
// it), bit for bit the accumulate mode's result on a zeroed dinp (x + 0 = x); dweight and
// dbias still accumulate.
TEST(Matmul, BackwardOverwritesTheInputGradientWhenAsked) {
  const int BT = 5, C = 7, OC = 3;
  auto inp = random_vector(BT * C, 31);
  auto w = random_vector(OC * C, 32);
  auto dout = random_vector(BT * OC, 33);
  std::vector<float> dinp_zeroed(BT * C, 0.0f), dw_a(OC * C, 0.5f), db_a(OC, 0.5f);
  matmul_backward(dinp_zeroed.data(), dw_a.data(), db_a.data(), dout.data(), inp.data(),
                  w.data(), BT, C, OC);
  std::vector<float> dinp_garbage(BT * C, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> dw_o(OC * C, 0.5f), db_o(OC, 0.5f);
  matmul_backward(dinp_garbage.data(), dw_o.data(), db_o.data(), dout.data(), inp.data(),
                  w.data(), BT, C, OC, InputGrad::kOverwrite);
  EXPECT_EQ(dinp_garbage, dinp_zeroed);
  EXPECT_EQ(dw_o, dw_a);
  EXPECT_EQ(db_o, db_a);
}

TEST(Matmul, BackwardSkipsNullGradients) {
  const int BT = 3, C = 4, OC = 2;
  auto inp = random_vector(BT * C, 21);
  auto w = random_vector(OC * C, 22);
  auto dout = random_vector(BT * OC, 23);
  std::vector<float> dw(OC * C, 0.0f);
  // Only dweight requested: weight may even be null, since dinp is not computed.
  matmul_backward(nullptr, dw.data(), nullptr, dout.data(), inp.data(), nullptr, BT, C, OC);
  // dweight[o][c] = sum_i dout[i][o] * inp[i][c]
  std::vector<double> ref(OC * C, 0.0);
  for (int o = 0; o < OC; ++o)
    for (int c = 0; c < C; ++c)
      for (int i = 0; i < BT; ++i) ref[o * C + c] += double{dout[i * OC + o]} * inp[i * C + c];
  EXPECT_TRUE(all_close("dweight", dw, ref, 1e-6, 1e-6));
}

TEST(Sgemm, AllTransposeCombinationsMatchNaiveLoop) {
  const int M = 5, N = 4, K = 3;
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      auto a = random_vector(M * K, 31);  // (M, K) or stored (K, M) when transposed
      auto b = random_vector(K * N, 32);
      auto c = random_vector(M * N, 33);
      const auto c0 = c;
      const int lda = ta == Trans::kNo ? K : M;
      const int ldb = tb == Trans::kNo ? N : K;
      sgemm(ta, tb, M, N, K, 2.0f, a.data(), lda, b.data(), ldb, 0.5f, c.data(), N);
      std::vector<double> ref(M * N);
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
          double s = 0.0;
          for (int k = 0; k < K; ++k) {
            const double aik = ta == Trans::kNo ? a[i * K + k] : a[k * M + i];
            const double bkj = tb == Trans::kNo ? b[k * N + j] : b[j * K + k];
            s += aik * bkj;
          }
          ref[i * N + j] = 2.0 * s + 0.5 * c0[i * N + j];  // alpha = 2, beta = 0.5
        }
      EXPECT_TRUE(all_close("sgemm", c, ref, 1e-5, 1e-5))
          << "trans_a=" << (ta == Trans::kYes) << " trans_b=" << (tb == Trans::kYes);
    }
  }
}

TEST(Matmul, BadArgumentsThrowKernelError) {
  std::vector<float> buf(16, 0.0f);
  EXPECT_THROW(matmul_forward(buf.data(), buf.data(), buf.data(), nullptr, 0, 2, 2),
               KernelError);
  EXPECT_THROW(matmul_forward(nullptr, buf.data(), buf.data(), nullptr, 2, 2, 2), KernelError);
  EXPECT_THROW(matmul_backward(buf.data(), nullptr, nullptr, buf.data(), buf.data(), nullptr, 2,
                               2, 2),
               KernelError);  // dinp requested but weight is null
  // lda = 1 is shorter than a row of a (K = 2).
  EXPECT_THROW(sgemm(Trans::kNo, Trans::kNo, 2, 2, 2, 1.0f, buf.data(), 1, buf.data(), 2, 0.0f,
                     buf.data(), 2),
               KernelError);
  EXPECT_THROW(set_blas_threads(0), KernelError);
  EXPECT_NO_THROW(set_blas_threads(1));
}

}  // namespace
}  // namespace strata::kernels::cpu
