// GeLU (tanh approximation) forward against the formula in double, backward against finite
// differences.
#include "kernels/cpu/gelu.h"

#include <gtest/gtest.h>

#include <cmath>
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

TEST(Gelu, BadArgumentsThrowKernelError) {
  std::vector<float> buf(4, 0.0f);
  EXPECT_THROW(gelu_forward(nullptr, buf.data(), 4), KernelError);
  EXPECT_THROW(gelu_backward(buf.data(), buf.data(), buf.data(), -1), KernelError);
}

}  // namespace
}  // namespace strata::kernels::cpu
