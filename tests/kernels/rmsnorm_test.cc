// rmsnorm_forward against the statistic worked in double; rmsnorm_backward against finite
// differences of sum(out * w) with respect to inp and weight.
#include "kernels/cpu/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>
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

TEST(RmsNorm, ForwardMatchesDoubleReference) {
  const int BT = 5, C = 9;
  // Two epsilons: Llama 3's 1e-5 and a large one whose effect is visible in the output.
  for (const float eps : {1e-5f, 0.5f}) {
    SCOPED_TRACE(eps);
    auto inp = random_vector(BT * C, 41, -2.0f, 3.0f);
    auto w = random_vector(C, 42);
    std::vector<float> out(BT * C), rstd(BT);
    rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), BT, C, eps);
    // Reference: rstd = 1 / sqrt(sum x^2 / C + eps) (no mean subtracted), out = x rstd w.
    std::vector<double> ref_out(BT * C), ref_rstd(BT);
    for (int i = 0; i < BT; ++i) {
      double ms = 0.0;
      for (int c = 0; c < C; ++c) ms += double{inp[i * C + c]} * inp[i * C + c];
      const double s = 1.0 / std::sqrt(ms / C + double{eps});
      ref_rstd[i] = s;
      for (int c = 0; c < C; ++c) ref_out[i * C + c] = inp[i * C + c] * s * w[c];
    }
    // rstd: a double result rounded to fp32 (6e-8 relative); out: two fp32 products on top
    // (a few ulps, 1e-6 relative) plus atol for outputs near 0.
    EXPECT_TRUE(all_close("rstd", rstd, ref_rstd, 1e-7, 1e-6));
    EXPECT_TRUE(all_close("out", out, ref_out, 1e-6, 1e-5));

    // In place (out aliasing inp) gives the same bits.
    rmsnorm_forward(inp.data(), rstd.data(), inp.data(), w.data(), BT, C, eps);
    EXPECT_EQ(inp, out);
  }
}

TEST(RmsNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int BT = 3, C = 8;
  const float eps = 1e-2f;  // large enough that a backward forgetting eps would fail
  auto inp = random_vector(BT * C, 51, -2.0f, 2.0f);
  auto w = random_vector(C, 52, 0.5f, 1.5f);
  auto lw = random_vector(BT * C, 54);
  std::vector<float> out(BT * C), rstd(BT);
  rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), BT, C, eps);
  auto dinp0 = random_vector(BT * C, 55, -0.1f, 0.1f);
  auto dw0 = random_vector(C, 56, -0.1f, 0.1f);
  auto dinp = dinp0, dw = dw0;
  rmsnorm_backward(dinp.data(), dw.data(), lw.data(), inp.data(), w.data(), rstd.data(), BT, C);

  std::vector<float> r2(BT);
  auto loss = [&] {
    rmsnorm_forward(out.data(), r2.data(), inp.data(), w.data(), BT, C, eps);
    return weighted_sum(out, lw);
  };
  // As layernorm_test: h = 1e-3, truncation h^2 L''' / 6 ~ 1e-6 for inputs of spread ~1;
  // fp32 forward noise ~ 1e-7 |L| (~3) / 2e-3 ~ 2e-4. atol 1e-3, rtol 1e-2 bound both.
  EXPECT_TRUE(gradient_matches("dinp", inp, accumulated_part(dinp, dinp0), loss, 1e-3, 1e-3,
                               1e-2));
  EXPECT_TRUE(gradient_matches("dweight", w, accumulated_part(dw, dw0), loss, 1e-3, 1e-3, 1e-2));
}

TEST(RmsNorm, BadArgumentsThrowKernelError) {
  std::vector<float> buf(8, 1.0f);
  EXPECT_THROW(rmsnorm_forward(buf.data(), buf.data(), buf.data(), nullptr, 2, 4, 1e-5f),
               KernelError);
  EXPECT_THROW(rmsnorm_forward(buf.data(), buf.data(), buf.data(), buf.data(), 2, -4, 1e-5f),
               KernelError);
  EXPECT_THROW(rmsnorm_forward(buf.data(), buf.data(), buf.data(), buf.data(), 2, 4, -1e-5f),
               KernelError);
  EXPECT_THROW(rmsnorm_forward(buf.data(), buf.data(), buf.data(), buf.data(), 2, 4, NAN),
               KernelError);
  EXPECT_THROW(rmsnorm_backward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                nullptr, 2, 4),
               KernelError);
}

}  // namespace
}  // namespace strata::kernels::cpu
