// fast_expf (kernels/cpu/fast_exp.h) against exp in double over its whole normal-result
// range, and its out-of-range and special values.
#include "kernels/cpu/fast_exp.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cstdint>
#include <cmath>
#include <limits>

namespace strata::kernels::cpu {
namespace {

TEST(FastExp, RelativeErrorBelowOneAndAQuarterUlpOverTheNormalRange) {
  // Every 97th float from ln(FLT_MIN) to ln(FLT_MAX) (about 23 million points; 97 is prime so
  // the mantissa patterns are not aliased). Error budget: the reduced argument r carries
  // ~1 u (u = 2^-24 = 6e-8) from n ln2's low part, the degree-5 minimax polynomial ~2e-8 on
  // |r| <= ln2/2, and Horner's six roundings mostly scale by r^k < 0.35^k so only the last
  // two (~1 u) and the final scaling's rounding (0.5 u) count: about 2.5 u = 1.5e-7, the bound
  // tested; measured 7.9e-8 (1.3 u, 0.66 ulp of [1, 2)).
  double worst = 0.0;
  float worst_x = 0.0f;
  int checked = 0;
  // A float's bits grow with its magnitude on each side of zero.
  const auto sweep = [&](float zero, float end) {
    const auto last = std::bit_cast<std::uint32_t>(end);
    for (auto bits = std::bit_cast<std::uint32_t>(zero); bits <= last; bits += 97) {
      const float x = std::bit_cast<float>(bits);
      const double ref = std::exp(static_cast<double>(x));
      const double rel = std::fabs(static_cast<double>(fast_expf(x)) - ref) / ref;
      if (rel > worst) {
        worst = rel;
        worst_x = x;
      }
      ++checked;
    }
  };
  // The float nearest ln(FLT_MAX) may round up past it, where e^x overflows.
  sweep(0.0f, std::nextafter(std::log(FLT_MAX), 0.0f));
  sweep(-0.0f, std::log(FLT_MIN));
  EXPECT_GT(checked, 10'000'000);
  EXPECT_LT(worst, 1.5e-7) << "at x = " << worst_x;
  EXPECT_EQ(fast_expf(0.0f), 1.0f);  // r = 0, n = 0: the polynomial's constant term exactly
}

TEST(FastExp, OutOfRangeAndSpecialValues) {
  EXPECT_EQ(fast_expf(-std::numeric_limits<float>::infinity()), 0.0f);  // masked scores
  EXPECT_EQ(fast_expf(-200.0f), 0.0f);
  EXPECT_EQ(fast_expf(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(fast_expf(89.0f), std::numeric_limits<float>::infinity());  // e^89 > FLT_MAX
  EXPECT_TRUE(std::isnan(fast_expf(std::numeric_limits<float>::quiet_NaN())));
  // Denormal results are still close in absolute terms: e^-100 = 3.72e-44, a few of the
  // least denormal (1.4e-45) apart at most.
  EXPECT_NEAR(fast_expf(-100.0f), std::exp(-100.0), 3e-45);
  EXPECT_GT(fast_expf(-100.0f), 0.0f);
}

}  // namespace
}  // namespace strata::kernels::cpu
