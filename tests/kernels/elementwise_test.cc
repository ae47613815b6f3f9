// Elementwise helpers: each against its one-line definition (exact in fp32).
#include "kernels/cpu/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/check.h"
#include "tests/kernels/grad_check.h"

namespace strata::kernels::cpu {
namespace {

using strata::kernels::testing::random_vector;

TEST(Elementwise, EachOpMatchesItsDefinitionExactly) {
  const std::int64_t n = 37;
  auto a = random_vector(n, 221), b = random_vector(n, 222);
  std::vector<float> out(n);
  residual_forward(out.data(), a.data(), b.data(), n);
  for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(out[i], a[i] + b[i]);
  auto acc = a;
  accumulate(acc.data(), b.data(), n);
  EXPECT_EQ(acc, out);  // a += b is the same single fp32 add as a + b
  scale(acc.data(), n, 0.5f);
  for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(acc[i], out[i] * 0.5f);
  copy(acc.data(), b.data(), n);
  EXPECT_EQ(acc, b);
  zero(acc.data(), n);
  EXPECT_EQ(acc, std::vector<float>(n, 0.0f));
  residual_forward(a.data(), a.data(), b.data(), n);  // in place: out aliases a
  EXPECT_EQ(a, out);
}

TEST(Elementwise, FusedBiasResidualHasTheBitsOfTheThreeSteps) {
  // Below and above kParallelMinElements (the serial and the OpenMP path), with and without
  // a bias, out separate and aliasing y: the bits of copy, add_bias, residual_forward.
  for (const int rows : {3, 300}) {
    const int cols = 257;
    const std::int64_t n = std::int64_t{rows} * cols;
    const auto y = random_vector(n, 231), res = random_vector(n, 232);
    const auto bias = random_vector(cols, 233);
    for (const bool with_bias : {false, true}) {
      std::vector<float> expected(n);
      copy(expected.data(), y.data(), n);
      if (with_bias) add_bias(expected.data(), bias.data(), rows, cols);
      residual_forward(expected.data(), expected.data(), res.data(), n);
      const float* b = with_bias ? bias.data() : nullptr;
      std::vector<float> out(n, NAN);
      bias_residual_forward(out.data(), y.data(), b, res.data(), rows, cols);
      EXPECT_EQ(out, expected) << rows << " rows, bias " << with_bias;
      auto in_place = y;
      bias_residual_forward(in_place.data(), in_place.data(), b, res.data(), rows, cols);
      EXPECT_EQ(in_place, expected) << rows << " rows, bias " << with_bias << ", in place";
    }
  }
}

TEST(Elementwise, BadArgumentsThrowKernelError) {
  std::vector<float> buf(4);
  EXPECT_THROW(accumulate(buf.data(), nullptr, 4), KernelError);
  EXPECT_THROW(zero(buf.data(), -1), KernelError);
}

}  // namespace
}  // namespace strata::kernels::cpu
