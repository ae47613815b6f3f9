// swiglu_forward against silu(gate) * up worked in double on the [gate | up] row layout;
// swiglu_backward against finite differences of sum(out * w) with respect to both halves.
#include "kernels/cpu/swiglu.h"

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

TEST(SwiGlu, ForwardMatchesDoubleReference) {
  const int BT = 4, F = 7;
  auto inp = random_vector(BT * 2 * F, 61, -6.0f, 6.0f);
  inp[0] = -100.0f;  // exp(100) overflows fp32: silu must still be 0 * up, not NaN
  std::vector<float> out(BT * F);
  swiglu_forward(out.data(), inp.data(), BT, F);
  // Reference: row i is [gate (F) | up (F)]; out = gate / (1 + exp(-gate)) * up.
  std::vector<double> ref(BT * F);
  for (int i = 0; i < BT; ++i) {
    for (int j = 0; j < F; ++j) {
      const double a = inp[i * 2 * F + j];
      ref[i * F + j] = a / (1.0 + std::exp(-a)) * inp[i * 2 * F + F + j];
    }
  }
  // fp32 exp (1 ulp) and three roundings: a few ulps, 1e-6 relative; atol for ~0 outputs.
  EXPECT_TRUE(all_close("out", out, ref, 1e-6, 1e-5));
}

TEST(SwiGlu, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int BT = 3, F = 5;
  auto inp = random_vector(BT * 2 * F, 71, -4.0f, 4.0f);
  const auto lw = random_vector(BT * F, 72);
  std::vector<float> out(BT * F);
  const auto d0 = random_vector(BT * 2 * F, 73, -0.1f, 0.1f);
  auto dinp = d0;
  swiglu_backward(dinp.data(), inp.data(), lw.data(), BT, F);
  auto loss = [&] {
    swiglu_forward(out.data(), inp.data(), BT, F);
    return weighted_sum(out, lw);
  };
  // h = 1e-3: truncation h^2 L''' / 6 with |silu'''| <= ~0.5 and |up| <= 4: ~3e-7. fp32 noise:
  // |L| <= 15 terms of ~4, rounding ~1e-7 * 60 / 2e-3 ~ 3e-3 at worst. atol 5e-3, rtol 1e-2.
  EXPECT_TRUE(gradient_matches("dinp", inp, accumulated_part(dinp, d0), loss, 1e-3, 5e-3, 1e-2));
}

TEST(SwiGlu, BadArgumentsThrowKernelError) {
  std::vector<float> buf(8, 0.0f);
  EXPECT_THROW(swiglu_forward(buf.data(), nullptr, 2, 2), KernelError);
  EXPECT_THROW(swiglu_forward(buf.data(), buf.data(), 2, 0), KernelError);
  EXPECT_THROW(swiglu_backward(buf.data(), buf.data(), nullptr, 2, 2), KernelError);
  EXPECT_THROW(swiglu_backward(buf.data(), buf.data(), buf.data(), -1, 2), KernelError);
}

}  // namespace
}  // namespace strata::kernels::cpu
