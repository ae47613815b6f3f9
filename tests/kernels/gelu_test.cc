// GeLU (tanh approximation) forward against the formula in double, backward against finite
// differences.
#include "kernels/cpu/gelu.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <numbers>
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

TEST(Gelu, ForwardMatchesTanhFormula) {
  auto x = random_vector(64, 61, -4.0f, 4.0f);
  x[0] = 0.0f;  // gelu(0) = 0 exactly
  std::vector<float> out(x.size());
  gelu_forward(out.data(), x.data(), static_cast<std::int64_t>(x.size()));
  std::vector<double> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    ref[i] = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) *
                                        (v + 0.044715 * v * v * v)));
  }
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_TRUE(all_close("gelu", out, ref, 1e-6, 1e-5));
}

// The kernel's tanh is its own (branch-free, so the loop vectorizes): over the whole range,
// in the tails where tanh saturates, and at inputs whose cube overflows, the forward and the
// derivative stay within a few float ulps of the formula in double. Bounds: 4 ulps of 1
// (4 x 2^-24 ~ 2.4e-7) on tanh, scaled by 0.5 |x| for the forward and by the derivative's
// terms for the backward, plus 1e-7 slack for the float rounding of u itself.
TEST(Gelu, MatchesDoublePrecisionOverTheWholeRange) {
  std::vector<float> x;
  for (int i = -20000; i <= 20000; ++i) x.push_back(static_cast<float>(i) * 5e-4f);  // [-10, 10]
  for (float big : {15.0f, 43.0f, 44.0f, 100.0f, 1e4f, 1e15f, 1e30f}) {
    x.push_back(big);
    x.push_back(-big);
  }
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<float> out(x.size()), dinp(x.size(), 0.0f), ones(x.size(), 1.0f);
  gelu_forward(out.data(), x.data(), n);
  gelu_backward(dinp.data(), x.data(), ones.data(), n);
  const double k = std::sqrt(2.0 / std::numbers::pi);
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double u = k * (v + 0.044715 * v * v * v);
    const double th = std::tanh(u);
    const double fwd = 0.5 * v * (1.0 + th);
    const double grad = 0.5 * (1.0 + th) +
                        0.5 * v * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * v * v);
    const double ulps = 4.0 * std::ldexp(1.0, -24);
    EXPECT_NEAR(out[i], fwd, 0.5 * std::fabs(v) * (ulps + 1e-7) + 1e-30 + std::fabs(fwd) * 1e-7)
        << "x = " << v;
    if (std::fabs(v) < 1e4) {  // beyond, v * v overflows the float derivative's terms
      EXPECT_NEAR(dinp[i], grad, 1e-6 * (1.0 + std::fabs(v))) << "x = " << v;
    }
  }
}

TEST(Gelu, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const std::int64_t N = 40;
  auto x = random_vector(N, 71, -3.0f, 3.0f);
  auto lw = random_vector(N, 72);
  auto d0 = random_vector(N, 73, -0.1f, 0.1f);
  auto d = d0;
  gelu_backward(d.data(), x.data(), lw.data(), N);
  std::vector<float> out(N);
  auto loss = [&] {
    gelu_forward(out.data(), x.data(), N);
    return weighted_sum(out, lw);
  };
  // h = 1e-3: |gelu'''| < 2, truncation < 1e-6; fp32 noise ~ 1e-7 * 10 / 2e-3 = 5e-4.
  EXPECT_TRUE(gradient_matches("dinp", x, accumulated_part(d, d0), loss, 1e-3, 1e-3, 1e-2));
}

// In place: d = gelu'(x) * d, bit for bit what gelu_backward accumulates into zeros (the same
// product, plus 0).
TEST(Gelu, BackwardInPlaceEqualsTheAccumulatedGradientOnZeros) {
  const std::int64_t N = 1000;
  auto x = random_vector(N, 81, -5.0f, 5.0f);
  auto dout = random_vector(N, 82);
  std::vector<float> accumulated(N, 0.0f);
  gelu_backward(accumulated.data(), x.data(), dout.data(), N);
  auto in_place = dout;
  gelu_backward_in_place(in_place.data(), x.data(), N);
  EXPECT_EQ(in_place, accumulated);
}

// The AVX-512 and baseline versions run the same float operations lane by lane (no FMA
// contraction in gelu.cc), so they agree bit for bit, here over the whole range, the
// saturated tails and a length that leaves a remainder past the 16-lane vectors.
TEST(Gelu, AvxAndBaselineVersionsGiveTheSameBits) {
  if (cpu_isa_level() < IsaLevel::kAvx512) {
    GTEST_SKIP() << "this CPU has no AVX-512 (x86-64-v4)";
  }
  std::vector<float> x;
  for (int i = -20003; i <= 20003; ++i) x.push_back(static_cast<float>(i) * 5e-4f);
  for (float big : {15.0f, 44.0f, 1e4f, 1e30f}) {
    x.push_back(big);
    x.push_back(-big);
  }
  const auto n = static_cast<std::int64_t>(x.size());
  const auto dout = random_vector(n, 91);
  const auto run = [&](Isa isa) {
    std::vector<float> out(x.size()), acc(x.size(), 0.25f), in_place = dout;
    gelu_forward(out.data(), x.data(), n, isa);
    gelu_backward(acc.data(), x.data(), dout.data(), n, isa);
    gelu_backward_in_place(in_place.data(), x.data(), n, isa);
    return std::vector<std::vector<float>>{out, acc, in_place};
  };
  const auto wide = run(Isa::kAvx512);
  const auto base = run(Isa::kBaseline);
  const auto best = run(Isa::kBest);
  for (std::size_t k = 0; k < wide.size(); ++k) {
    for (std::size_t i = 0; i < x.size(); ++i) {
      // Bits, not values: past |x| ~ 1e19 the derivative's x^2 overflows to a NaN on both.
      const auto bits = [&](const auto& v) { return std::bit_cast<std::uint32_t>(v[k][i]); };
      ASSERT_EQ(bits(wide), bits(base)) << "output " << k << " at x = " << x[i];
      ASSERT_EQ(bits(best), bits(wide)) << "output " << k << " at x = " << x[i];
    }
  }
}

TEST(Gelu, BadArgumentsThrowKernelError) {
  std::vector<float> buf(4, 0.0f);
  EXPECT_THROW(gelu_forward(nullptr, buf.data(), 4), KernelError);
  EXPECT_THROW(gelu_backward(buf.data(), buf.data(), buf.data(), -1), KernelError);
  EXPECT_THROW(gelu_backward_in_place(nullptr, buf.data(), 4), KernelError);
}

}  // namespace
}  // namespace strata::kernels::cpu
