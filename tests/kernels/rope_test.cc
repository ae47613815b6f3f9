// rope_forward against the rotation worked in double, including a hand-worked case that tells
// the rotate_half pairing (i, i + HS/2) from the interleaved one (2i, 2i + 1); position
// offsets (a split sequence gets the same bits as the whole); columns past the heads left
// alone; rope_backward against finite differences and as the inverse of the forward. Llama 3.1's
// scaled frequencies (kernels/rope_frequency.h) worked by hand in each of the three bands,
// and the kernel rotating by them.
#include "kernels/cpu/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/check.h"
#include "tests/kernels/grad_check.h"

namespace strata::kernels::cpu {
namespace {

using strata::kernels::testing::all_close;
using strata::kernels::testing::gradient_matches;
using strata::kernels::testing::random_vector;
using strata::kernels::testing::weighted_sum;

const RopeFrequencies kTheta10k{10000.0};  // unscaled, RoFormer's base

// Row layout of these tests: `heads` rotated heads of HS, then `extra` floats not rotated
// (the v part of a packed qkv row).
struct Layout {
  int B, T, heads, HS, extra;
  std::int64_t stride() const { return std::int64_t{heads} * HS + extra; }
  std::size_t size() const { return static_cast<std::size_t>(B) * T * stride(); }
};

std::vector<double> reference(const std::vector<float>& x, const Layout& L, int offset,
                              double theta) {
  std::vector<double> y(x.begin(), x.end());
  const int half = L.HS / 2;
  for (int b = 0; b < L.B; ++b)
    for (int t = 0; t < L.T; ++t)
      for (int h = 0; h < L.heads; ++h)
        for (int i = 0; i < half; ++i) {
          const double angle = (offset + t) * std::pow(theta, -2.0 * i / L.HS);
          const std::size_t lo = (std::size_t(b) * L.T + t) * L.stride() + h * L.HS + i;
          const double a = x[lo], c = x[lo + half];
          y[lo] = a * std::cos(angle) - c * std::sin(angle);
          y[lo + half] = c * std::cos(angle) + a * std::sin(angle);
        }
  return y;
}

TEST(Rope, PairsDimIWithDimIPlusHalfHeadLikeHuggingFace) {
  // HS = 4, position 1, theta 10000: pair 0 (dims 0, 2) turns by 1 rad, pair 1 (dims 1, 3) by
  // 10000^(-2/4) = 0.01 rad. x = e_0 goes to (cos 1, 0, sin 1, 0); the interleaved
  // convention would give (cos 1, sin 1, 0, 0).
  std::vector<float> x = {9.0f, 9.0f, 9.0f, 9.0f, 1.0f, 0.0f, 0.0f, 0.0f};  // T = 2
  rope_forward(x.data(), 1, 2, 1, 4, 4, 0, kTheta10k);
  // Position 0 is the identity (cos 0 = 1, sin 0 = 0 exactly).
  EXPECT_EQ(std::vector<float>(x.begin(), x.begin() + 4), std::vector<float>(4, 9.0f));
  const std::vector<double> want = {std::cos(1.0), 0.0, std::sin(1.0), 0.0};
  EXPECT_TRUE(all_close("position 1", std::vector<float>(x.begin() + 4, x.end()), want, 1e-7,
                        1e-6));
}

TEST(Rope, ForwardMatchesDoubleReferenceAndLeavesOtherColumnsAlone) {
  // q and k heads (3 + 1) rotated, a v head (16) after them untouched; theta 500000 (Llama 3).
  const Layout L{2, 9, 4, 16, 16};
  const int offset = 70000;  // large positions: an fp32 angle would be off by ~1e-2 rad
  const auto x = random_vector(L.size(), 81);
  auto y = x;
  rope_forward(y.data(), L.B, L.T, L.heads, L.HS, L.stride(), offset, RopeFrequencies{500000.0});
  // cos and sin are a double result rounded to fp32 (6e-8 relative); each output is
  // a cos - b sin in fp32 with |a|, |b| <= 1: three roundings, < 3e-7 absolute.
  EXPECT_TRUE(all_close("y", y, reference(x, L, offset, 500000.0), 3e-7, 0.0));
  for (int r = 0; r < L.B * L.T; ++r) {
    for (int c = L.heads * L.HS; c < L.stride(); ++c) {
      ASSERT_EQ(y[r * L.stride() + c], x[r * L.stride() + c]) << "row " << r << " col " << c;
    }
  }
}

TEST(Rope, SplitSequenceWithOffsetsGivesTheSameBits) {
  // Rows [0, 5) at offset 100 and rows [5, 12) at offset 105 (as two sequence-parallel ranks
  // would hold them) are the whole sequence at offset 100: same angles, same arithmetic.
  const Layout whole{1, 12, 2, 8, 0};
  const auto x = random_vector(whole.size(), 82);
  auto y = x;
  rope_forward(y.data(), 1, 12, 2, 8, 16, 100, kTheta10k);
  auto first = std::vector<float>(x.begin(), x.begin() + 5 * 16);
  auto second = std::vector<float>(x.begin() + 5 * 16, x.end());
  rope_forward(first.data(), 1, 5, 2, 8, 16, 100, kTheta10k);
  rope_forward(second.data(), 1, 7, 2, 8, 16, 105, kTheta10k);
  first.insert(first.end(), second.begin(), second.end());
  EXPECT_EQ(first, y);
}

TEST(Rope, BackwardMatchesFiniteDifferencesAndInvertsForward) {
  const Layout L{2, 5, 3, 6, 4};
  const int offset = 11;
  auto x = random_vector(L.size(), 83);
  const auto lw = random_vector(L.size(), 84);
  // Gradient of sum(w * rope(x)) w.r.t. x: R^T w, i.e. w rotated by -angle.
  auto grad = lw;
  rope_backward(grad.data(), L.B, L.T, L.heads, L.HS, L.stride(), offset, kTheta10k);
  std::vector<float> y;
  auto loss = [&] {
    y = x;
    rope_forward(y.data(), L.B, L.T, L.heads, L.HS, L.stride(), offset, kTheta10k);
    return weighted_sum(y, lw);
  };
  // The loss is linear in x: no truncation error; fp32 noise ~1e-7 |L| (~5) / 2e-3 ~ 3e-4.
  EXPECT_TRUE(gradient_matches("dx", x, grad, loss, 1e-3, 1e-3, 1e-2));

  // Backward after forward is the identity up to the rotations' rounding (cos^2 + sin^2 = 1
  // in fp32 to ~2e-7; inputs <= 1): 1e-6.
  auto round_trip = x;
  rope_forward(round_trip.data(), L.B, L.T, L.heads, L.HS, L.stride(), offset, kTheta10k);
  rope_backward(round_trip.data(), L.B, L.T, L.heads, L.HS, L.stride(), offset, kTheta10k);
  EXPECT_TRUE(all_close("backward(forward(x))", round_trip, x, 1e-6, 0.0));
}

// Llama 3.1's "llama3" scaling with small numbers: theta 10000, HS 8, so inv_i = 10000^(-i/4)
// = 1, 0.1, 0.01, 0.001 and wavelen_i = 2 pi / inv_i = 6.28, 62.8, 628.3, 6283.2. With
// original 1000, low 1, high 4: high_wavelen = 1000 / 4 = 250, low_wavelen = 1000 / 1 = 1000.
RopeFrequencies small_llama3() { return {10000.0, 8.0, 1.0, 4.0, 1000.0}; }

TEST(Rope, ScaledFrequenciesFollowTheLlama3Bands) {
  const RopeFrequencies f = small_llama3();
  // i = 0, 1: wavelen 6.28, 62.8 < 250: untouched.
  EXPECT_DOUBLE_EQ(rope_inverse_frequency(f, 0, 8), 1.0);
  EXPECT_DOUBLE_EQ(rope_inverse_frequency(f, 1, 8), 0.1);
  // i = 2: wavelen 628.3 in [250, 1000]: s = (1000 / 628.3185 - 1) / (4 - 1)
  // = 0.5915494 / 3 = 0.1971831; inv = 0.01 ((1 - s) / 8 + s) = 0.01 (0.1003521 + 0.1971831)
  // = 0.002975353.
  EXPECT_NEAR(rope_inverse_frequency(f, 2, 8), 0.002975353, 1e-9);
  // i = 3: wavelen 6283 > 1000: divided by the factor, 0.001 / 8 = 0.000125.
  EXPECT_DOUBLE_EQ(rope_inverse_frequency(f, 3, 8), 0.000125);
  // factor 1 is no scaling, bit for bit the unscaled theta^(-2i/HS).
  RopeFrequencies unscaled = f;
  unscaled.factor = 1.0;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(rope_inverse_frequency(unscaled, i, 8), std::pow(10000.0, -2.0 * i / 8)) << i;
  }
}

TEST(Rope, ForwardRotatesByTheScaledFrequencies) {
  // Position 1000 (pos_offset 1000, T 1): pair 3 (dims 3, 7) turns by 1000 * 0.000125 =
  // 0.125 rad, pair 2 (dims 2, 6) by 1000 * 0.002975353 = 2.975353 rad (see above). x = e_3 +
  // e_2 goes to cos/sin of those angles in dims (2, 6) and (3, 7).
  std::vector<float> x = {0.0f, 0.0f, 1.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  rope_forward(x.data(), 1, 1, 1, 8, 8, 1000, small_llama3());
  const double a2 = 2.975352507, a3 = 0.125;
  const std::vector<double> want = {0.0, 0.0, std::cos(a2), std::cos(a3),
                                    0.0, 0.0, std::sin(a2), std::sin(a3)};
  // cos and sin rounded to fp32, and the hand value of a2 to 1e-9 (times 1000 positions: 1e-6
  // rad): 2e-6.
  EXPECT_TRUE(all_close("scaled rotation", x, want, 2e-6, 0.0));
  // The backward turns it back (the same scaled angles, negated).
  rope_backward(x.data(), 1, 1, 1, 8, 8, 1000, small_llama3());
  EXPECT_TRUE(all_close("back", x, std::vector<double>{0, 0, 1, 1, 0, 0, 0, 0}, 1e-6, 0.0));
}

TEST(Rope, BadArgumentsThrowKernelError) {
  std::vector<float> buf(64, 0.0f);
  EXPECT_THROW(rope_forward(nullptr, 1, 2, 1, 4, 4, 0, kTheta10k), KernelError);
  EXPECT_THROW(rope_forward(buf.data(), 1, 2, 1, 5, 5, 0, kTheta10k), KernelError);   // odd HS
  EXPECT_THROW(rope_forward(buf.data(), 1, 2, 2, 4, 6, 0, kTheta10k), KernelError);   // stride
  EXPECT_THROW(rope_forward(buf.data(), 1, 2, 1, 4, 4, -1, kTheta10k), KernelError);  // offset
  const RopeFrequencies zero_theta{0.0};
  EXPECT_THROW(rope_backward(buf.data(), 1, 2, 1, 4, 4, 0, zero_theta), KernelError);
  EXPECT_THROW(rope_backward(buf.data(), 0, 2, 1, 4, 4, 0, kTheta10k), KernelError);
  // Scaling the frequency bounds need: factor >= 1, 0 < low < high, original > 0.
  for (const RopeFrequencies bad : {RopeFrequencies{1e4, 0.5, 1.0, 4.0, 8192.0},
                                    RopeFrequencies{1e4, 8.0, 4.0, 4.0, 8192.0},
                                    RopeFrequencies{1e4, 8.0, 0.0, 4.0, 8192.0},
                                    RopeFrequencies{1e4, 8.0, 1.0, 4.0, 0.0}}) {
    EXPECT_THROW(rope_forward(buf.data(), 1, 2, 1, 4, 4, 0, bad), KernelError);
  }
}

}  // namespace
}  // namespace strata::kernels::cpu
