// AdamW against a step worked by hand and a scalar reference, tiling invariance, decoupled
// weight decay, sum of squares and clip scale, thread-count independence.
#include "kernels/cpu/adamw.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/check.h"
#include "tests/kernels/grad_check.h"

namespace strata::kernels::cpu {
namespace {

using strata::kernels::testing::all_close;
using strata::kernels::testing::random_vector;

TEST(AdamW, OneElementStepWorkedByHand) {
  // p = 1, g = 0.5, m = v = 0, lr = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01, t = 1:
  //   m = 0.1 * 0.5 = 0.05            v = 0.001 * 0.25 = 2.5e-4
  //   mhat = 0.05 / 0.1 = 0.5         vhat = 2.5e-4 / 0.001 = 0.25, sqrt = 0.5
  //   p = 1 - 0.1 * (0.5 / (0.5 + 1e-8) + 0.01 * 1) = 1 - 0.1 * 1.01 = 0.899
  float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
  adamw_update(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
  // Tolerances: 0.9f and 0.999f are not exact in fp32; 1 - 0.999f = 9.99987e-4 is 1.3e-5
  // off relative, hence v within 1e-8 (4e-5 relative) and m within 1e-7 (2e-6 relative).
  // The same error sits in the bias correction 1 - b2^1 and cancels in vhat, so p is
  // good to a few fp32 ulps.
  EXPECT_NEAR(m, 0.05f, 1e-7);
  EXPECT_NEAR(v, 2.5e-4f, 1e-8);
  EXPECT_NEAR(p, 0.899f, 1e-6);
}

TEST(AdamW, MatchesScalarReferenceOverThreeSteps) {
  const std::int64_t n = 1000;
  auto p = random_vector(n, 181);
  auto m = std::vector<float>(n, 0.0f), v = std::vector<float>(n, 0.0f);
  std::vector<double> rp(p.begin(), p.end()), rm(n, 0.0), rv(n, 0.0);
  const AdamWParams hp{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
  for (int step = 1; step <= 3; ++step) {
    auto g = random_vector(n, 190 + step);
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp, step);
    // The formula from adamw.h, in double.
    for (std::int64_t i = 0; i < n; ++i) {
      rm[i] = 0.9 * rm[i] + 0.1 * g[i];
      rv[i] = 0.95 * rv[i] + 0.05 * double{g[i]} * g[i];
      const double mhat = rm[i] / (1.0 - std::pow(0.9, step));
      const double vhat = rv[i] / (1.0 - std::pow(0.95, step));
      rp[i] -= 1e-2 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.1 * rp[i]);
    }
  }
  // mhat / sqrt(vhat) is ill-conditioned only where g ~ 0 (ratio capped near 1 by Adam);
  // fp32 through three steps: 1e-5 absolute on params of size 1 and updates of size 1e-2.
  EXPECT_TRUE(all_close("param", p, rp, 1e-5, 1e-5));
  EXPECT_TRUE(all_close("m", m, rm, 1e-6, 1e-5));
  EXPECT_TRUE(all_close("v", v, rv, 1e-7, 1e-5));
}

TEST(AdamW, TiledUpdateIsBitIdenticalToFull) {
  const std::int64_t n = 1031;  // prime: tiles do not line up with vector widths
  auto p1 = random_vector(n, 201), g = random_vector(n, 202);
  auto m1 = random_vector(n, 203, -0.1f, 0.1f), v1 = random_vector(n, 204, 0.0f, 0.1f);
  auto p2 = p1, m2 = m1, v2 = v1;
  const AdamWParams hp{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
  adamw_update(p1.data(), g.data(), m1.data(), v1.data(), n, hp, 7);
  for (std::int64_t b = 0; b < n; b += 97) {
    adamw_update_range(p2.data(), g.data(), m2.data(), v2.data(), b, std::min(n, b + 97), hp, 7);
  }
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
}

// The AVX-512 and baseline versions run the same float operations per element (adamw.cc
// has no FMA contraction; division and square root are correctly rounded): the same bits.
TEST(AdamW, AvxAndBaselineVersionsGiveTheSameBits) {
  if (cpu_isa_level() < IsaLevel::kAvx512) {
    GTEST_SKIP() << "this CPU has no AVX-512 (x86-64-v4)";
  }
  const std::int64_t n = 70001;  // several blocks and a remainder past the 16-lane vectors
  auto p1 = random_vector(n, 211), g = random_vector(n, 212);
  auto m1 = random_vector(n, 213, -0.1f, 0.1f), v1 = random_vector(n, 214, 0.0f, 0.1f);
  auto p2 = p1, m2 = m1, v2 = v1;
  const AdamWParams hp{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
  adamw_update_range(p1.data(), g.data(), m1.data(), v1.data(), 0, n, hp, 3, Isa::kAvx512);
  adamw_update_range(p2.data(), g.data(), m2.data(), v2.data(), 0, n, hp, 3, Isa::kBaseline);
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
}

TEST(AdamW, WeightDecayIsDecoupledFromTheGradient) {
  // Zero gradient and zero state: the Adam term is 0 / (0 + eps) = 0, so only decay acts:
  // p = p - lr * wd * p = 2 - 0.5 * 0.1 * 2 = 1.9.
  float p = 2.0f, g = 0.0f, m = 0.0f, v = 0.0f;
  adamw_update(&p, &g, &m, &v, 1, 0.5f, 0.9f, 0.999f, 1e-8f, 0.1f, 1);
  EXPECT_FLOAT_EQ(p, 1.9f);
}

TEST(SumOfSquares, MatchesDoubleLoopAndIgnoresThreadCount) {
  const std::int64_t n = 10007;  // spans 3 blocks of 4096, a remainder past the 8 lanes
  auto x = random_vector(n, 211);
  double ref = 0.0;
  for (float e : x) ref += double{e} * e;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = sum_of_squares(x.data(), n);
  omp_set_num_threads(2);
  const double two = sum_of_squares(x.data(), n);
  omp_set_num_threads(saved);
  EXPECT_NEAR(one, ref, 1e-9 * ref);  // both in double; only the order differs
  EXPECT_EQ(one, two);                // fixed blocks: bit-identical
  if (cpu_isa_level() >= IsaLevel::kAvx512) {
    EXPECT_EQ(sum_of_squares(x.data(), n, Isa::kAvx512),
              sum_of_squares(x.data(), n, Isa::kBaseline));  // fixed lanes: the same bits
  }
  // clip_scale: norm 10, max 1 -> 1 / (10 + 1e-6); norm below max -> 1; max <= 0 -> off.
  EXPECT_FLOAT_EQ(clip_scale(10.0, 1.0f), static_cast<float>(1.0 / (10.0 + 1e-6)));
  EXPECT_EQ(clip_scale(0.5, 1.0f), 1.0f);
  EXPECT_EQ(clip_scale(100.0, 0.0f), 1.0f);
}

TEST(AdamW, BadArgumentsThrowKernelError) {
  float p = 1.0f, g = 0.0f, m = 0.0f, v = 0.0f;
  EXPECT_THROW(adamw_update(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 0), KernelError);
  EXPECT_THROW(adamw_update(&p, &g, &m, &v, 1, 0.1f, 1.0f, 0.999f, 1e-8f, 0.0f, 1), KernelError);
  EXPECT_THROW(adamw_update_range(&p, &g, &m, &v, 3, 2, AdamWParams{}, 1), KernelError);
  EXPECT_THROW(sum_of_squares(nullptr, 4), KernelError);
}

}  // namespace
}  // namespace strata::kernels::cpu
