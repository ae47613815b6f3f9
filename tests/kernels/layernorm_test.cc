// layernorm_forward against statistics worked in double; layernorm_backward against finite
// differences of sum(out * w) with respect to inp, weight and bias.
#include "kernels/cpu/layernorm.h"

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

TEST(LayerNorm, ForwardMatchesDoubleReference) {
  const int BT = 5, C = 9;
  auto inp = random_vector(BT * C, 41, -2.0f, 3.0f);
  auto w = random_vector(C, 42);
  auto b = random_vector(C, 43);
  std::vector<float> out(BT * C), mean(BT), rstd(BT);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), BT, C);
  // Reference: mean = sum x / C, var = sum (x - mean)^2 / C (biased),
  // rstd = 1 / sqrt(var + 1e-5), out = (x - mean) * rstd * w + b.
  std::vector<double> ref_out(BT * C), ref_mean(BT), ref_rstd(BT);
  for (int i = 0; i < BT; ++i) {
    double m = 0.0, v = 0.0;
    for (int c = 0; c < C; ++c) m += inp[i * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (inp[i * C + c] - m) * (inp[i * C + c] - m);
    v /= C;
    const double s = 1.0 / std::sqrt(v + 1e-5);
    ref_mean[i] = m;
    ref_rstd[i] = s;
    for (int c = 0; c < C; ++c) ref_out[i * C + c] = (inp[i * C + c] - m) * s * w[c] + b[c];
  }
  // fp32 storage of double-accurate results: a few ulps (1e-6 relative) plus atol for ~0.
  EXPECT_TRUE(all_close("mean", mean, ref_mean, 1e-6, 1e-6));
  EXPECT_TRUE(all_close("rstd", rstd, ref_rstd, 1e-6, 1e-6));
  EXPECT_TRUE(all_close("out", out, ref_out, 1e-5, 1e-5));
}

TEST(LayerNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int BT = 3, C = 8;
  auto inp = random_vector(BT * C, 51, -2.0f, 2.0f);
  auto w = random_vector(C, 52, 0.5f, 1.5f);
  auto b = random_vector(C, 53);
  auto lw = random_vector(BT * C, 54);
  std::vector<float> out(BT * C), mean(BT), rstd(BT);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), BT, C);
  auto dinp0 = random_vector(BT * C, 55, -0.1f, 0.1f);
  auto dw0 = random_vector(C, 56, -0.1f, 0.1f);
  auto db0 = random_vector(C, 57, -0.1f, 0.1f);
  auto dinp = dinp0, dw = dw0, db = db0;
  layernorm_backward(dinp.data(), dw.data(), db.data(), lw.data(), inp.data(), w.data(),
                     mean.data(), rstd.data(), BT, C);

  std::vector<float> m2(BT), r2(BT);
  auto loss = [&] {
    layernorm_forward(out.data(), m2.data(), r2.data(), inp.data(), w.data(), b.data(), BT, C);
    return weighted_sum(out, lw);
  };
  // h = 1e-3: truncation error h^2 * L''' / 6 ~ 1e-6 for inputs of spread ~1; fp32 forward
  // noise ~ 1e-7 * |L| (~3) / 2e-3 ~ 2e-4. atol 1e-3, rtol 1e-2 bound both.
  EXPECT_TRUE(gradient_matches("dinp", inp, accumulated_part(dinp, dinp0), loss, 1e-3, 1e-3,
                               1e-2));
  EXPECT_TRUE(gradient_matches("dweight", w, accumulated_part(dw, dw0), loss, 1e-3, 1e-3, 1e-2));
  EXPECT_TRUE(gradient_matches("dbias", b, accumulated_part(db, db0), loss, 1e-3, 1e-3, 1e-2));
}

// The AVX-512 and baseline versions sum a row's statistics in double in other orders: they
// agree to a few float ulps (the statistics differ by ~1e-16 relative, the float outputs by
// at most one rounding: 1e-6 relative; a C that is not a multiple of 16 leaves remainders).
TEST(LayerNorm, AvxAndBaselineVersionsAgree) {
  if (cpu_isa_level() < IsaLevel::kAvx512) {
    GTEST_SKIP() << "this CPU has no AVX-512 (x86-64-v4)";
  }
  const int BT = 9, C = 203;
  const auto inp = random_vector(BT * C, 101, -3.0f, 3.0f);
  const auto w = random_vector(C, 102);
  const auto b = random_vector(C, 103);
  const auto dout = random_vector(BT * C, 104);
  struct Out {
    std::vector<float> y, mean, rstd, dx, dw, db;
  };
  const auto run = [&](Isa isa) {
    Out o{std::vector<float>(BT * C), std::vector<float>(BT), std::vector<float>(BT),
          std::vector<float>(BT * C, 0.5f), std::vector<float>(C, 0.5f),
          std::vector<float>(C, 0.5f)};
    layernorm_forward(o.y.data(), o.mean.data(), o.rstd.data(), inp.data(), w.data(), b.data(),
                      BT, C, isa);
    layernorm_backward(o.dx.data(), o.dw.data(), o.db.data(), dout.data(), inp.data(), w.data(),
                       o.mean.data(), o.rstd.data(), BT, C, isa);
    return o;
  };
  const Out wide = run(Isa::kAvx512);
  const Out base = run(Isa::kBaseline);
  EXPECT_TRUE(all_close("y", wide.y, base.y, 1e-6, 1e-6));
  EXPECT_TRUE(all_close("mean", wide.mean, base.mean, 1e-7, 1e-6));
  EXPECT_TRUE(all_close("rstd", wide.rstd, base.rstd, 1e-7, 1e-6));
  EXPECT_TRUE(all_close("dx", wide.dx, base.dx, 1e-6, 1e-6));
  EXPECT_TRUE(all_close("dw", wide.dw, base.dw, 1e-6, 1e-6));
  EXPECT_TRUE(all_close("db", wide.db, base.db, 1e-6, 1e-6));
}

TEST(LayerNorm, BadArgumentsThrowKernelError) {
  std::vector<float> buf(8, 0.0f);
  EXPECT_THROW(layernorm_forward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                 nullptr, 2, 4),
               KernelError);
  EXPECT_THROW(layernorm_forward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                 buf.data(), 2, -4),
               KernelError);
}

}  // namespace
}  // namespace strata::kernels::cpu
