// rope_forward against the rotation worked in double, including a hand-worked case that tells
// the rotate_half pairing (i, i + HS/2) from the interleaved one (2i, 2i + 1); position
// offsets (a split sequence gets the same bits as the whole); columns past the heads left
// alone; rope_backward against finite differences and as the inverse of the forward.
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
  rope_forward(x.data(), 1, 2, 1, 4, 4, 0, 10000.0f);
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
  rope_forward(y.data(), L.B, L.T, L.heads, L.HS, L.stride(), offset, 500000.0f);
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
  rope_forward(y.data(), 1, 12, 2, 8, 16, 100, 10000.0f);
  auto first = std::vector<float>(x.begin(), x.begin() + 5 * 16);
  auto second = std::vector<float>(x.begin() + 5 * 16, x.end());
  rope_forward(first.data(), 1, 5, 2, 8, 16, 100, 10000.0f);
  rope_forward(second.data(), 1, 7, 2, 8, 16, 105, 10000.0f);
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
  rope_backward(grad.data(), L.B, L.T, L.heads, L.HS, L.stride(), offset, 10000.0f);
  std::vector<float> y;
  auto loss = [&] {
    y = x;
    rope_forward(y.data(), L.B, L.T, L.heads, L.HS, L.stride(), offset, 10000.0f);
    return weighted_sum(y, lw);
  };
  // The loss is linear in x: no truncation error; fp32 noise ~1e-7 |L| (~5) / 2e-3 ~ 3e-4.
  EXPECT_TRUE(gradient_matches("dx", x, grad, loss, 1e-3, 1e-3, 1e-2));

  // Backward after forward is the identity up to the rotations' rounding (cos^2 + sin^2 = 1
  // in fp32 to ~2e-7; inputs <= 1): 1e-6.
  auto round_trip = x;
  rope_forward(round_trip.data(), L.B, L.T, L.heads, L.HS, L.stride(), offset, 10000.0f);
  rope_backward(round_trip.data(), L.B, L.T, L.heads, L.HS, L.stride(), offset, 10000.0f);
  EXPECT_TRUE(all_close("backward(forward(x))", round_trip, x, 1e-6, 0.0));
}

TEST(Rope, BadArgumentsThrowKernelError) {
  std::vector<float> buf(64, 0.0f);
  EXPECT_THROW(rope_forward(nullptr, 1, 2, 1, 4, 4, 0, 1e4f), KernelError);
  EXPECT_THROW(rope_forward(buf.data(), 1, 2, 1, 5, 5, 0, 1e4f), KernelError);   // odd HS
  EXPECT_THROW(rope_forward(buf.data(), 1, 2, 2, 4, 6, 0, 1e4f), KernelError);   // stride
  EXPECT_THROW(rope_forward(buf.data(), 1, 2, 1, 4, 4, -1, 1e4f), KernelError);  // offset
  EXPECT_THROW(rope_backward(buf.data(), 1, 2, 1, 4, 4, 0, 0.0f), KernelError);  // theta
  EXPECT_THROW(rope_backward(buf.data(), 0, 2, 1, 4, 4, 0, 1e4f), KernelError);
}

}  // namespace
}  // namespace strata::kernels::cpu
