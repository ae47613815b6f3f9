// AdamW against a step worked by hand and a scalar reference, tiling invariance, decoupled
// weight decay, sum of squares and clip scale, thread-count independence.
#include "kernels/cpu/adamw.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/bf16.h"
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

// adamw.h's formula as a plain float loop in the kernel's order of operations, with the
// bf16 copy by kernels/bf16.h's cast: the reference the compiled versions are held to bit
// for bit. Test code is compiled for baseline x86-64 at -O0: one rounding per operation, no
// fused multiply-adds.
void reference_adamw(std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m,
                     std::vector<float>& v, const AdamWParams& hp, int step,
                     std::vector<Bf16Bits>& copy) {
  const float bc1 = 1.0f - static_cast<float>(std::pow(double{hp.beta1}, step));
  const float bc2 = 1.0f - static_cast<float>(std::pow(double{hp.beta2}, step));
  for (std::size_t i = 0; i < p.size(); ++i) {
    m[i] = hp.beta1 * m[i] + (1.0f - hp.beta1) * g[i];
    v[i] = hp.beta2 * v[i] + (1.0f - hp.beta2) * g[i] * g[i];
    const float mhat = m[i] / bc1;
    const float vhat = v[i] / bc2;
    p[i] = p[i] - hp.lr * (mhat / (std::sqrt(vhat) + hp.eps) + hp.weight_decay * p[i]);
    copy[i] = float_to_bf16(p[i]);
  }
}

bool same_bits(const void* a, const void* b, std::size_t bytes) {
  return std::memcmp(a, b, bytes) == 0;
}

// Every compiled version this CPU runs (baseline, AVX2, AVX-512: adamw.cc has no FMA
// contraction, and division and square root are correctly rounded), at one, two and three
// threads, with and without the bf16 copy, over two steps: the reference loop's bits. The
// length leaves a remainder past the 16-lane vectors and spans several OpenMP blocks; the
// parameters include NaN, infinities and a zero with a zero gradient.
TEST(AdamW, EveryVersionAndThreadCountGivesTheReferenceBitsAndBf16Copy) {
  const std::int64_t n = 70001;
  auto p0 = random_vector(n, 211), g = random_vector(n, 212);
  const auto m0 = random_vector(n, 213, -0.1f, 0.1f), v0 = random_vector(n, 214, 0.0f, 0.1f);
  p0[5] = NAN;
  p0[6] = INFINITY;
  p0[7] = -INFINITY;
  p0[8] = 0.0f;
  g[8] = 0.0f;
  const AdamWParams hp{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
  auto rp = p0, rm = m0, rv = v0;
  std::vector<Bf16Bits> rcopy(n);
  for (int step = 3; step <= 4; ++step) reference_adamw(rp, g, rm, rv, hp, step, rcopy);
  std::vector<Isa> versions = {Isa::kBaseline};
  if (cpu_isa_level() >= IsaLevel::kAvx2) versions.push_back(Isa::kAvx2);
  if (cpu_isa_level() >= IsaLevel::kAvx512) versions.push_back(Isa::kAvx512);
  versions.push_back(Isa::kBest);
  const int saved = omp_get_max_threads();
  for (Isa isa : versions) {
    for (int threads : {1, 2, 3}) {
      for (bool with_copy : {false, true}) {
        SCOPED_TRACE("isa " + std::to_string(static_cast<int>(isa)) + ", " +
                     std::to_string(threads) + " threads" + (with_copy ? ", bf16 copy" : ""));
        omp_set_num_threads(threads);
        auto p = p0, m = m0, v = v0;
        std::vector<Bf16Bits> copy(n, Bf16Bits{0x1234});
        for (int step = 3; step <= 4; ++step) {
          adamw_update_range(p.data(), g.data(), m.data(), v.data(), 0, n, hp, step, isa,
                             with_copy ? copy.data() : nullptr);
        }
        EXPECT_TRUE(same_bits(p.data(), rp.data(), n * sizeof(float)));
        EXPECT_TRUE(same_bits(m.data(), rm.data(), n * sizeof(float)));
        EXPECT_TRUE(same_bits(v.data(), rv.data(), n * sizeof(float)));
        if (with_copy) {
          EXPECT_TRUE(same_bits(copy.data(), rcopy.data(), n * sizeof(Bf16Bits)));
        } else {
          EXPECT_EQ(copy[0].bits, 0x1234);  // no copy asked: none written
        }
      }
    }
  }
  omp_set_num_threads(saved);
  EXPECT_NE(rcopy[5].bits & 0x7fc0, 0);  // the NaN's copy is a quiet NaN
}

// A range's copy lands at the range's elements (the pointers address element 0).
TEST(AdamW, RangeWritesItsOwnPartOfTheBf16Copy) {
  const std::int64_t n = 300;
  auto p = random_vector(n, 231), g = random_vector(n, 232);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::vector<Bf16Bits> copy(n, Bf16Bits{0x1234});
  const AdamWParams hp{1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f};
  adamw_update_range(p.data(), g.data(), m.data(), v.data(), 100, 200, hp, 1, Isa::kBest,
                     copy.data());
  for (std::int64_t i = 0; i < n; ++i) {
    if (i >= 100 && i < 200) {
      EXPECT_EQ(copy[i].bits, float_to_bf16(p[i]).bits) << i;
    } else {
      EXPECT_EQ(copy[i].bits, 0x1234) << i;
    }
  }
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
  if (cpu_isa_level() >= IsaLevel::kAvx2) {
    EXPECT_EQ(sum_of_squares(x.data(), n, Isa::kAvx2),
              sum_of_squares(x.data(), n, Isa::kBaseline));  // fixed lanes: the same bits
  }
  if (cpu_isa_level() >= IsaLevel::kAvx512) {
    EXPECT_EQ(sum_of_squares(x.data(), n, Isa::kAvx512),
              sum_of_squares(x.data(), n, Isa::kBaseline));
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
