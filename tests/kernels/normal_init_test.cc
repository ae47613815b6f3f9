// normal_fill against the counter-based Box-Muller formula the initial parameters have
// always been drawn with, bit for bit, on both compiled loops; normal_exact against values
// computed independently; the argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <vector>

#include "kernels/check.h"
#include "kernels/cpu/normal_init.h"
#include "tests/kernels/old_normal_formula.h"

namespace strata::kernels::cpu {
namespace {

// The formula as param_init.cc wrote it before normal_fill existed (old_normal_formula.h).
using testing_support::old_normal_at;

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Counts the elements of normal_fill(key, first, n, scale) whose bits differ from the old
// formula's float(scale * old_normal_at).
std::int64_t differing(std::uint64_t key, std::int64_t first, std::int64_t n, double scale,
                       NormalFillPath path) {
  std::vector<float> got(static_cast<std::size_t>(n));
  normal_fill(got.data(), key, first, n, scale, path);
  std::int64_t bad = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    const float want = static_cast<float>(scale * old_normal_at(key, first + j));
    bad += bits_of(got[static_cast<std::size_t>(j)]) != bits_of(want) ? 1 : 0;
  }
  return bad;
}

TEST(NormalExact, MatchesValuesComputedIndependently) {
  // Python (its math.log / math.cos are the C library's, math.sqrt is correctly rounded):
  //   def sm(x): x = (x + 0x9E3779B97F4A7C15) % 2**64
  //              x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
  //              x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % 2**64; return x ^ (x >> 31)
  //   u1 = 1 - (sm(key ^ sm(2 i)) >> 11) * 2**-53;  u2 = (sm(key ^ sm(2 i + 1)) >> 11) * 2**-53
  //   repr(math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2))
  EXPECT_EQ(normal_exact(0, 0), -0.9831098317687947);
  EXPECT_EQ(normal_exact(1, 1), 1.811370989213138);
  EXPECT_EQ(normal_exact(0x5eed, 12345), -1.102695264531538);
  EXPECT_EQ(normal_exact(0xFFFFFFFFFFFFFFFFull, (std::int64_t{1} << 40) + 3), -0.23617377018372657);
}

TEST(NormalFill, EqualsTheFormulaBitForBitOnBothLoops) {
  // 2^20 elements per case: the fast path leaves about 1 in 1,000 to the exact formula, so
  // every case crosses that hand-over a few hundred times; large indices (a wte of an 8B
  // model has 2^29 elements) and the GPT-2 scales 0.02 and 0.02 / sqrt(2 L).
  for (const NormalFillPath path : {NormalFillPath::kBest, NormalFillPath::kBaseline}) {
    EXPECT_EQ(differing(0x9E3779B97F4A7C15ull, 0, 1 << 20, 0.02, path), 0);
    EXPECT_EQ(differing(12345, std::int64_t{3} << 29, 1 << 20, 0.02 / std::sqrt(48.0), path), 0);
    EXPECT_EQ(differing(~0ull, 77, 1001, 1.0, path), 0);  // not a whole number of blocks
  }
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
  EXPECT_THROW(normal_fill(nullptr, 1, 0, 4, 1.0), KernelError);
  EXPECT_NO_THROW(normal_fill(nullptr, 1, 0, 0, 1.0));  // nothing to write
}

}  // namespace
}  // namespace strata::kernels::cpu
