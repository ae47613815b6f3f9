// Elementwise helpers: each against its one-line definition (exact in fp32).
#include "kernels/cpu/elementwise.h"

#include <gtest/gtest.h>

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

TEST(Elementwise, BadArgumentsThrowKernelError) {
  std::vector<float> buf(4);
  EXPECT_THROW(accumulate(buf.data(), nullptr, 4), KernelError);
  EXPECT_THROW(zero(buf.data(), -1), KernelError);
}

}  // namespace
}  // namespace strata::kernels::cpu
