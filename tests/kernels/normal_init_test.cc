// normal_fill against the counter-based Box-Muller formula (normal_formula.h, written plainly),
// bit for bit, on both compiled loops, for ranges that begin and end at either half of a
// pair; normal_exact against values computed independently; the pair's two outputs as
// uncorrelated standard normals; the argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <vector>

#include "kernels/check.h"
#include "kernels/cpu/normal_init.h"
#include "tests/kernels/normal_formula.h"

namespace strata::kernels::cpu {
namespace {

// The formula with glibc's log, cos and sin, restated in the test (normal_formula.h).
using testing_support::reference_normal_at;

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Counts the elements of normal_fill(key, first, n, scale) whose bits differ from the
// formula's float(scale * reference_normal_at).
std::int64_t differing(std::uint64_t key, std::int64_t first, std::int64_t n, double scale,
                       NormalFillPath path) {
  std::vector<float> got(static_cast<std::size_t>(n));
  normal_fill(got.data(), key, first, n, scale, path);
  std::int64_t bad = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    const float want = static_cast<float>(scale * reference_normal_at(key, first + j));
    bad += bits_of(got[static_cast<std::size_t>(j)]) != bits_of(want) ? 1 : 0;
  }
  return bad;
}

TEST(NormalExact, MatchesValuesComputedIndependently) {
  // Python (its math.log / math.cos / math.sin are the C library's, math.sqrt is correctly
  // rounded):
  //   def sm(x): x = (x + 0x9E3779B97F4A7C15) % 2**64
  //              x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
  //              x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % 2**64; return x ^ (x >> 31)
  //   k = i // 2;  u1 = 1 - (sm(key ^ sm(2 k)) >> 11) * 2**-53
  //   u2 = (sm(key ^ sm(2 k + 1)) >> 11) * 2**-53;  r = math.sqrt(-2 * math.log(u1))
  //   repr(r * math.cos(2 * math.pi * u2) if i % 2 == 0 else r * math.sin(2 * math.pi * u2))
  // Both halves of a pair (0, 1; 12344, 12345; 2^40 + 2, 2^40 + 3): the sine and the cosine.
  EXPECT_EQ(normal_exact(0, 0), -0.9831098317687947);
  EXPECT_EQ(normal_exact(0, 1), 1.0710648100403155);
  EXPECT_EQ(normal_exact(1, 1), -0.1353030295374068);
  EXPECT_EQ(normal_exact(0x5eed, 12344), -1.5307832967953101);
  EXPECT_EQ(normal_exact(0x5eed, 12345), 0.33855934685269845);
  EXPECT_EQ(normal_exact(0xFFFFFFFFFFFFFFFFull, (std::int64_t{1} << 40) + 2), -3.027318048490755);
  EXPECT_EQ(normal_exact(0xFFFFFFFFFFFFFFFFull, (std::int64_t{1} << 40) + 3), -0.25158201606707675);
}

TEST(NormalFill, EqualsTheFormulaBitForBitOnBothLoops) {
  // 2^20 elements per case: the fast path leaves about 1 in 1,000 to the exact formula, so
  // every case crosses that hand-over a few hundred times; large indices (a wte of an 8B
  // model has 2^29 elements) and the GPT-2 scales 0.02 and 0.02 / sqrt(2 L). Ranges that
  // begin at the odd half of a pair, end at the even half (its odd half drawn and dropped),
  // both, or hold one element of either half.
  for (const NormalFillPath path : {NormalFillPath::kBest, NormalFillPath::kBaseline}) {
    EXPECT_EQ(differing(0x9E3779B97F4A7C15ull, 0, 1 << 20, 0.02, path), 0);
    EXPECT_EQ(differing(12345, (std::int64_t{3} << 29) + 1, 1 << 20, 0.02 / std::sqrt(48.0), path), 0);
    EXPECT_EQ(differing(~0ull, 77, 1001, 1.0, path), 0);  // odd to odd, not whole blocks
    EXPECT_EQ(differing(~0ull, 77, 1000, 1.0, path), 0);  // odd to even
    EXPECT_EQ(differing(~0ull, 76, 129, 1.0, path), 0);   // even to even, a block and one
    for (std::int64_t first = 0; first < 4; ++first) {
      EXPECT_EQ(differing(5, first, 1, 1.0, path), 0) << first;
    }
  }
}

TEST(NormalFill, APairsTwoElementsAreUncorrelatedStandardNormals) {
  // Box-Muller's cosine and sine of one (u1, u2) are independent N(0, 1). Over n = 2^20
  // pairs, the mean of each half has a standard deviation of 1/sqrt(n) = 1e-3, its variance
  // one of sqrt(2/n) = 1.4e-3, and the correlation of the halves one of 1/sqrt(n): 5 of
  // those each. A half that copies the other (correlation 1) or loses its sign (mean
  // E|N(0, 1)| = 0.8) is off by hundreds of them.
  constexpr std::int64_t kPairs = std::int64_t{1} << 20;
  std::vector<float> v(2 * kPairs);
  normal_fill(v.data(), 2024, 0, 2 * kPairs, 1.0);
  double sum[2] = {0, 0}, squares[2] = {0, 0}, cross = 0;
  for (std::int64_t k = 0; k < kPairs; ++k) {
    const double even = v[static_cast<std::size_t>(2 * k)], odd = v[static_cast<std::size_t>(2 * k + 1)];
    sum[0] += even;
    sum[1] += odd;
    squares[0] += even * even;
    squares[1] += odd * odd;
    cross += even * odd;
  }
  const double n = static_cast<double>(kPairs);
  for (int h = 0; h < 2; ++h) {
    EXPECT_NEAR(sum[h] / n, 0.0, 5.0 / std::sqrt(n)) << "half " << h;
    EXPECT_NEAR(squares[h] / n, 1.0, 5.0 * std::sqrt(2.0 / n)) << "half " << h;
  }
  EXPECT_NEAR(cross / n, 0.0, 5.0 / std::sqrt(n));
}

TEST(NormalFill, EveryStartGivesTheSameElements) {
  // Element i depends on (key, i) only: filling [100, 300) equals the tail of [0, 300).
  std::vector<float> whole(300), tail(200);
  normal_fill(whole.data(), 42, 0, 300, 0.5);
  normal_fill(tail.data(), 42, 100, 200, 0.5);
  for (std::size_t j = 0; j < tail.size(); ++j) EXPECT_EQ(bits_of(tail[j]), bits_of(whole[100 + j]));
}

TEST(NormalFill, RejectsBadArguments) {
  std::vector<float> out(4);
  EXPECT_THROW(normal_fill(out.data(), 1, 0, -1, 1.0), KernelError);
  EXPECT_THROW(normal_fill(out.data(), 1, -1, 4, 1.0), KernelError);  // indices start at 0
  EXPECT_THROW(normal_fill(nullptr, 1, 0, 4, 1.0), KernelError);
  EXPECT_NO_THROW(normal_fill(nullptr, 1, 0, 0, 1.0));  // nothing to write
}

}  // namespace
}  // namespace strata::kernels::cpu
