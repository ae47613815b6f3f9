// fast_exp16 (kernels/cpu/fast_exp_avx512.h) against exp in double over the same points as
// fast_expf's test, and its out-of-range and special values. Skipped without AVX-512.
#include "kernels/cpu/fast_exp_avx512.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

namespace strata::kernels::cpu {
namespace {

#ifdef STRATA_HAVE_FAST_EXP_AVX512

// x in every lane; the lanes agree (checked), lane 0 returned.
__attribute__((target("avx512f"))) float exp16_of(float x) {
  alignas(64) float out[16];
  _mm512_store_ps(out, fast_exp16(_mm512_set1_ps(x)));
  for (float o : out) {
    if (std::bit_cast<std::uint32_t>(o) != std::bit_cast<std::uint32_t>(out[0])) return NAN;
  }
  return out[0];
}

TEST(FastExpAvx512, RelativeErrorBelowOneAndAQuarterUlpOverTheNormalRange) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512";
  // fast_expf's sweep and error budget (fast_exp_test.cc): the same reduction and polynomial;
  // the final scaling rounds once here too. Bound 1.5e-7 (2.5 u).
  double worst = 0.0;
  float worst_x = 0.0f;
  int checked = 0;
  const auto sweep = [&](float zero, float end) {
    const auto last = std::bit_cast<std::uint32_t>(end);
    for (auto bits = std::bit_cast<std::uint32_t>(zero); bits <= last; bits += 97) {
      const float x = std::bit_cast<float>(bits);
      const double ref = std::exp(static_cast<double>(x));
      const double rel = std::fabs(static_cast<double>(exp16_of(x)) - ref) / ref;
      if (!(rel <= worst)) {  // NaN counts as worst
        worst = rel;
        worst_x = x;
      }
      ++checked;
    }
  };
  sweep(0.0f, std::nextafter(std::log(FLT_MAX), 0.0f));
  sweep(-0.0f, std::log(FLT_MIN));
  EXPECT_GT(checked, 10'000'000);
  EXPECT_LT(worst, 1.5e-7) << "at x = " << worst_x;
  EXPECT_EQ(exp16_of(0.0f), 1.0f);  // r = 0, n = 0: the polynomial's constant term exactly
}

TEST(FastExpAvx512, OutOfRangeAndSpecialValues) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512";
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp16_of(-inf), 0.0f);  // masked scores
  EXPECT_EQ(exp16_of(-200.0f), 0.0f);
  EXPECT_EQ(exp16_of(inf), inf);
  EXPECT_EQ(exp16_of(89.0f), inf);  // e^89 > FLT_MAX
  EXPECT_EQ(exp16_of(88.8f), inf);
  EXPECT_TRUE(std::isnan(exp16_of(std::numeric_limits<float>::quiet_NaN())));
  // Denormal results: e^-100 = 3.72e-44, within a few of the least denormal (1.4e-45).
  EXPECT_NEAR(exp16_of(-100.0f), std::exp(-100.0), 3e-45);
  EXPECT_GT(exp16_of(-100.0f), 0.0f);
}

#endif

}  // namespace
}  // namespace strata::kernels::cpu
