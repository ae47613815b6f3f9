// Fused cross-entropy against log-softmax worked in double, backward against finite
// differences, and the vocab-parallel path over two uneven slices against the full one.
#include "kernels/cpu/cross_entropy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/check.h"
#include "tests/kernels/grad_check.h"

namespace strata::kernels::cpu {
namespace {

using strata::kernels::testing::accumulated_part;
using strata::kernels::testing::all_close;
using strata::kernels::testing::gradient_matches;
using strata::kernels::testing::random_vector;
using strata::kernels::testing::weighted_sum;

TEST(CrossEntropy, LossMatchesDoubleLogSoftmax) {
  const int BT = 6, V = 11;
  // Spread of 20 makes the max-subtraction matter (exp(20) without it loses digits).
  auto logits = random_vector(BT * V, 121, -10.0f, 10.0f);
  const std::vector<std::int32_t> targets = {0, 10, 3, 3, 7, 5};
  std::vector<float> losses(BT), row_max(BT), lse(BT);
  cross_entropy_forward(losses.data(), row_max.data(), lse.data(), logits.data(), targets.data(),
                        BT, V);
  std::vector<double> ref_loss(BT), ref_max(BT), ref_lse(BT);
  for (int i = 0; i < BT; ++i) {
    const float* x = &logits[i * V];
    ref_max[i] = *std::max_element(x, x + V);
    double z = 0.0;
    for (int j = 0; j < V; ++j) z += std::exp(double{x[j]});
    ref_lse[i] = std::log(z);
    ref_loss[i] = -(x[targets[i]] - ref_lse[i]);  // -log_softmax(x)[target]
  }
  EXPECT_TRUE(all_close("row_max", row_max, ref_max, 0.0, 0.0));  // a max is exact
  // Loss values ~10; fp32 storage ~1e-6 relative.
  EXPECT_TRUE(all_close("row_lse", lse, ref_lse, 1e-5, 1e-6));
  EXPECT_TRUE(all_close("losses", losses, ref_loss, 1e-5, 1e-6));
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int BT = 3, V = 7;
  auto logits = random_vector(BT * V, 131, -2.0f, 2.0f);
  const std::vector<std::int32_t> targets = {6, 0, 2};
  auto dlosses = random_vector(BT, 132, 0.1f, 1.0f);  // loss = sum_i losses[i] * dlosses[i]
  std::vector<float> losses(BT), row_max(BT), lse(BT);
  cross_entropy_forward(losses.data(), row_max.data(), lse.data(), logits.data(), targets.data(),
                        BT, V);
  auto d0 = random_vector(BT * V, 133, -0.1f, 0.1f);
  auto dlogits = d0;
  cross_entropy_backward(dlogits.data(), dlosses.data(), logits.data(), lse.data(),
                         targets.data(), BT, V);
  auto loss = [&] {
    cross_entropy_forward(losses.data(), row_max.data(), lse.data(), logits.data(),
                          targets.data(), BT, V);
    return weighted_sum(losses, dlosses);
  };
  // h = 1e-3: log-sum-exp third derivatives are < 1, truncation < 1e-6; fp32 noise
  // ~ 1e-7 * |L| (~5) / 2e-3 ~ 2.5e-4. atol 1e-3, rtol 1e-2.
  EXPECT_TRUE(gradient_matches("dlogits", logits, accumulated_part(dlogits, d0), loss, 1e-3,
                               1e-3, 1e-2));
}

// Runs the vocab-parallel recipe over slices [0, split) and [split, V), doing the
// all-reduces (max, sum, sum) by hand, and returns losses, row_lse and the full dlogits.
struct SlicedResult {
  std::vector<float> losses, lse, dlogits;
};
SlicedResult run_two_slices(const std::vector<float>& logits, const std::vector<std::int32_t>& tg,
                            const std::vector<float>& dlosses, int BT, int V, int split) {
  const int starts[2] = {0, split};
  const int widths[2] = {split, V - split};
  std::vector<std::vector<float>> slice(2);
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < BT; ++i)
      for (int j = 0; j < widths[r]; ++j) slice[r].push_back(logits[i * V + starts[r] + j]);
  std::vector<float> gmax(BT, -INFINITY), gsum(BT, 0.0f), gtarget(BT, 0.0f), part(BT);
  for (int r = 0; r < 2; ++r) {
    vocab_parallel_row_max(part.data(), slice[r].data(), BT, widths[r]);
    for (int i = 0; i < BT; ++i) gmax[i] = std::max(gmax[i], part[i]);  // all-reduce MAX
  }
  for (int r = 0; r < 2; ++r) {
    vocab_parallel_sum_exp(part.data(), slice[r].data(), gmax.data(), BT, widths[r]);
    for (int i = 0; i < BT; ++i) gsum[i] += part[i];  // all-reduce SUM
    vocab_parallel_target_logit(part.data(), slice[r].data(), tg.data(), BT, widths[r],
                                starts[r]);
    for (int i = 0; i < BT; ++i) gtarget[i] += part[i];  // exactly one rank is non-zero
  }
  SlicedResult res{std::vector<float>(BT), std::vector<float>(BT),
                   std::vector<float>(static_cast<size_t>(BT) * V, 0.0f)};
  vocab_parallel_loss(res.losses.data(), res.lse.data(), gmax.data(), gsum.data(),
                      gtarget.data(), BT);
  for (int r = 0; r < 2; ++r) {
    std::vector<float> d(slice[r].size(), 0.0f);
    vocab_parallel_cross_entropy_backward(d.data(), dlosses.data(), slice[r].data(),
                                          res.lse.data(), tg.data(), BT, widths[r], starts[r]);
    for (int i = 0; i < BT; ++i)
      for (int j = 0; j < widths[r]; ++j) res.dlogits[i * V + starts[r] + j] = d[i * widths[r] + j];
  }
  return res;
}

TEST(CrossEntropy, VocabParallelOverTwoSlicesEqualsFull) {
  const int BT = 5, V = 13, split = 5;  // uneven slices [0, 5) and [5, 13)
  auto logits = random_vector(BT * V, 141, -4.0f, 4.0f);
  // Targets in both slices, including both slice edges (4 | 5) and the last id.
  const std::vector<std::int32_t> targets = {4, 5, 0, 12, 9};
  auto dlosses = random_vector(BT, 142, 0.1f, 1.0f);
  std::vector<float> losses(BT), row_max(BT), lse(BT), dlogits(BT * V, 0.0f);
  cross_entropy_forward(losses.data(), row_max.data(), lse.data(), logits.data(), targets.data(),
                        BT, V);
  cross_entropy_backward(dlogits.data(), dlosses.data(), logits.data(), lse.data(),
                         targets.data(), BT, V);
  const auto sliced = run_two_slices(logits, targets, dlosses, BT, V, split);
  // Only the summation order of exp() differs (two float partials vs one double sum): a few
  // fp32 ulps, so 1e-6 absolute/relative.
  EXPECT_TRUE(all_close("losses", sliced.losses, losses, 1e-6, 1e-6));
  EXPECT_TRUE(all_close("row_lse", sliced.lse, lse, 1e-6, 1e-6));
  EXPECT_TRUE(all_close("dlogits", sliced.dlogits, dlogits, 1e-6, 1e-6));
}

TEST(CrossEntropy, BadArgumentsThrowKernelError) {
  std::vector<float> buf(64, 0.0f);
  const std::vector<std::int32_t> out_of_range = {0, 8};  // V = 8: id 8 is invalid
  EXPECT_THROW(cross_entropy_forward(buf.data(), buf.data(), buf.data(), buf.data(),
                                     out_of_range.data(), 2, 8),
               KernelError);
  const std::vector<std::int32_t> ok = {0, 1};
  EXPECT_THROW(cross_entropy_backward(buf.data(), buf.data(), buf.data(), buf.data(), ok.data(),
                                      2, 8),
               KernelError);  // dlogits aliases logits
  const std::vector<float> zero_sum = {0.0f, 1.0f};
  EXPECT_THROW(vocab_parallel_loss(buf.data(), buf.data(), buf.data(), zero_sum.data(),
                                   buf.data(), 2),
               KernelError);
}

}  // namespace
}  // namespace strata::kernels::cpu
