// Vocab-parallel cross-entropy pieces and add_bias on the GPU (kernels/cuda/vocab_parallel_loss.h)
// against their CPU twins (kernels/cpu/cross_entropy.h, kernels/cpu/elementwise.h), on
// bf16-representable inputs: odd shard widths (not a multiple of the 256 threads nor of the
// 8-column vectors), padded rows (ld > Vlocal) whose padding must stay untouched, targets
// outside the shard, a 2-shard split recombined as the TP all-reduces would, an empty shard,
// and a rerun that must give the same bits. The suite CudaVocabParallelLossArgs runs without
// a GPU (KernelError before any CUDA call); the others GTEST_SKIP without a device.
// The CPU twins take packed (BT, Vlocal) rows, so padded device rows are compared column by
// column with a packed copy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/vocab_parallel_loss.h"
#include "tests/kernels/cuda_arg_fakes.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/grad_check.h"

namespace strata::kernels::cuda {
namespace {

using strata::kernels::testing::all_close;
using strata::kernels::testing::random_vector;
using testing::CudaTest;
using testing::from_device;
using testing::from_device_bf16;
using testing::round_bf16;
using testing::rounded_bf16;
using testing::to_device;
using testing::to_device_bf16;

// A value no softmax over logits in [-4, 4] could ignore: if a kernel read the padding, the
// max (exactly) and the sums (by far) would show it. 50 is exact in bf16.
constexpr float kPadding = 50.0f;

// packed: (BT, V) -> (BT, ld) with the columns >= V set to `fill`.
std::vector<float> padded(const std::vector<float>& packed, int BT, int V, int ld, float fill) {
  std::vector<float> out(static_cast<std::size_t>(BT) * ld, fill);
  for (int r = 0; r < BT; ++r)
    for (int j = 0; j < V; ++j) out[static_cast<std::size_t>(r) * ld + j] = packed[r * V + j];
  return out;
}

// (BT, ld) -> its first V columns, packed.
std::vector<float> packed(const std::vector<float>& rows, int BT, int V, int ld) {
  std::vector<float> out(static_cast<std::size_t>(BT) * V);
  for (int r = 0; r < BT; ++r)
    for (int j = 0; j < V; ++j) out[r * V + j] = rows[static_cast<std::size_t>(r) * ld + j];
  return out;
}

// Every column >= V of every row still holds kPadding.
::testing::AssertionResult padding_untouched(const std::vector<float>& rows, int BT, int V,
                                             int ld) {
  for (int r = 0; r < BT; ++r) {
    for (int j = V; j < ld; ++j) {
      const float x = rows[static_cast<std::size_t>(r) * ld + j];
      if (x != kPadding) {
        return ::testing::AssertionFailure()
               << "padding touched: row " << r << " column " << j << " = " << x;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

DeviceBuffer floats(int n, float fill = 123.0f) {  // an output, prefilled so writes show
  return to_device(std::vector<float>(static_cast<std::size_t>(n), fill));
}

class CudaVocabParallelLoss : public CudaTest {};

// One shard, ld = Vlocal (packed: the scalar path) and ld = 1008 (16-byte rows: the vector
// path, with a 1-column tail since 1001 = 125 * 8 + 1).
TEST_F(CudaVocabParallelLoss, ShardStatisticsAndLossMatchCpu) {
  const int BT = 6, Vlocal = 1001, v0 = 3000;
  // In the shard: its first column, its last (v0 + 1000), one inside. Outside: just below,
  // just past the end, far below.
  const std::vector<std::int32_t> targets = {3000, 4000, 3017, 2999, 4001, 0};
  const auto logits = rounded_bf16(random_vector(BT * Vlocal, 11, -4.0f, 4.0f));
  std::vector<float> max(BT), gmax(BT), sum(BT), tl(BT), losses(BT), lse(BT);
  cpu::vocab_parallel_row_max(max.data(), logits.data(), BT, Vlocal);
  // As if another shard held a larger logit: any global max works, the sum is relative to it.
  for (int r = 0; r < BT; ++r) gmax[r] = max[r] + 0.75f;
  cpu::vocab_parallel_sum_exp(sum.data(), logits.data(), gmax.data(), BT, Vlocal);
  cpu::vocab_parallel_target_logit(tl.data(), logits.data(), targets.data(), BT, Vlocal, v0);
  cpu::vocab_parallel_loss(losses.data(), lse.data(), gmax.data(), sum.data(), tl.data(), BT);

  for (const int ld : {Vlocal, 1008}) {
    SCOPED_TRACE(::testing::Message() << "ld " << ld);
    auto d_logits = to_device_bf16(padded(logits, BT, Vlocal, ld, kPadding));
    auto d_targets = to_device(targets), d_gmax = to_device(gmax);
    auto d_max = floats(BT), d_sum = floats(BT), d_tl = floats(BT);
    vocab_parallel_row_max(d_max.as<float>(), d_logits.as<bf16>(), BT, Vlocal, ld, stream());
    vocab_parallel_sum_exp(d_sum.as<float>(), d_logits.as<bf16>(), d_gmax.as<float>(), BT,
                           Vlocal, ld, stream());
    vocab_parallel_target_logit(d_tl.as<float>(), d_logits.as<bf16>(),
                                d_targets.as<std::int32_t>(), BT, Vlocal, ld, v0, stream());
    // The loss from the CPU's statistics, so that it is compared on identical inputs.
    auto d_csum = to_device(sum), d_ctl = to_device(tl);
    auto d_losses = floats(BT), d_lse = floats(BT);
    vocab_parallel_loss(d_losses.as<float>(), d_lse.as<float>(), d_gmax.as<float>(),
                        d_csum.as<float>(), d_ctl.as<float>(), BT, stream());
    sync();
    // A max of bf16 values is one of them: exact. The padding (50) never wins.
    EXPECT_EQ(from_device<float>(d_max, BT), max);
    // fp32 block sums of 1001 exponentials vs the CPU's double sum rounded once: 1e-5.
    EXPECT_TRUE(all_close("local_sum", from_device<float>(d_sum, BT), sum, 1e-6, 1e-5));
    // A copied bf16 logit, or 0 for rows 3..5 (off-shard): exact.
    EXPECT_EQ(from_device<float>(d_tl, BT), tl);
    // Both max + log(sum) in double, rounded to fp32 once; the device's log is within 1 ulp
    // of double (~1e-16), so the fp32 results agree to an fp32 ulp at most.
    EXPECT_TRUE(all_close("row_lse", from_device<float>(d_lse, BT), lse, 0.0, 2e-7));
    EXPECT_TRUE(all_close("losses", from_device<float>(d_losses, BT), losses, 1e-6, 2e-7));
  }
}

// Backward in place over one shard; the CPU twin accumulates into zeros, so its result is
// the gradient itself. Rows of ld = 1008 keep columns 1001..1007 as padding.
TEST_F(CudaVocabParallelLoss, InPlaceBackwardMatchesCpuAndLeavesPaddingAlone) {
  const int BT = 4, Vlocal = 1001, v0 = 500;
  // First and last columns of the shard (500, 1500), then both neighbours outside it: those
  // rows get no onehot here (it lives in another shard).
  const std::vector<std::int32_t> targets = {500, 1500, 499, 1501};
  const std::vector<float> dlosses = {0.25f, -0.5f, 1.0f, 0.125f};
  const auto logits = rounded_bf16(random_vector(BT * Vlocal, 12, -4.0f, 4.0f));
  // A global lse as if another shard held as much mass again: max + log(sum) + log(2).
  std::vector<float> max(BT), sum(BT), lse(BT);
  cpu::vocab_parallel_row_max(max.data(), logits.data(), BT, Vlocal);
  cpu::vocab_parallel_sum_exp(sum.data(), logits.data(), max.data(), BT, Vlocal);
  for (int r = 0; r < BT; ++r) lse[r] = max[r] + std::log(2.0f * sum[r]);
  std::vector<float> grad(static_cast<std::size_t>(BT) * Vlocal, 0.0f);
  cpu::vocab_parallel_cross_entropy_backward(grad.data(), dlosses.data(), logits.data(),
                                             lse.data(), targets.data(), BT, Vlocal, v0);

  for (const int ld : {Vlocal, 1008}) {
    SCOPED_TRACE(::testing::Message() << "ld " << ld);
    auto d_logits = to_device_bf16(padded(logits, BT, Vlocal, ld, kPadding));
    auto d_dlosses = to_device(dlosses), d_lse = to_device(lse), d_targets = to_device(targets);
    vocab_parallel_cross_entropy_backward(d_logits.as<bf16>(), d_dlosses.as<float>(),
                                          d_lse.as<float>(), d_targets.as<std::int32_t>(), BT,
                                          Vlocal, ld, v0, stream());
    sync();
    const auto got = from_device_bf16(d_logits, static_cast<std::size_t>(BT) * ld);
    EXPECT_TRUE(padding_untouched(got, BT, Vlocal, ld));
    // p * dloss with p = exp(x - lse) >= exp(-4 - 4 - log(2 * 1001)) ~ 1.7e-7, rounded to
    // bf16 (half an ulp is 2^-9 ~ 2e-3 of the value): relative 4e-3, absolute 1e-9.
    EXPECT_TRUE(all_close("dlogits", packed(got, BT, Vlocal, ld), grad, 1e-9, 4e-3));
  }
}

// Vocabulary V = 2003 split as [0, 1000) in rows of ld = 1008 (vector path) and
// [1000, 2003) packed (scalar path). The statistics combined as the TP all-reduces would
// (MAX, SUM, SUM) must give the unsplit cross-entropy, and the two gradients side by side
// the unsplit gradient.
TEST_F(CudaVocabParallelLoss, TwoShardSplitEqualsUnsplitCrossEntropy) {
  const int BT = 6, V = 2003;
  struct Shard {
    int v0, Vlocal, ld;
  };
  const Shard shards[2] = {{0, 1000, 1008}, {1000, 1003, 1003}};
  // Each shard's first and last columns (0, 999 | 1000, 2002) and one inside each.
  const std::vector<std::int32_t> targets = {0, 999, 1000, 2002, 1500, 7};
  const std::vector<float> dlosses(BT, 1.0f / BT);  // mean loss
  const auto full = rounded_bf16(random_vector(BT * V, 13, -4.0f, 4.0f));
  std::vector<float> losses(BT), row_max(BT), row_lse(BT), dfull(BT * V, 0.0f);
  cpu::cross_entropy_forward(losses.data(), row_max.data(), row_lse.data(), full.data(),
                             targets.data(), BT, V);
  cpu::cross_entropy_backward(dfull.data(), dlosses.data(), full.data(), row_lse.data(),
                              targets.data(), BT, V);

  std::vector<DeviceBuffer> d_logits;
  for (const Shard& s : shards) {
    std::vector<float> slice(static_cast<std::size_t>(BT) * s.Vlocal);
    for (int r = 0; r < BT; ++r)
      for (int j = 0; j < s.Vlocal; ++j) slice[r * s.Vlocal + j] = full[r * V + s.v0 + j];
    d_logits.push_back(to_device_bf16(padded(slice, BT, s.Vlocal, s.ld, kPadding)));
  }
  auto d_targets = to_device(targets), d_dlosses = to_device(dlosses);
  // Runs `piece` on each shard into a fresh (BT) output and returns the two results.
  const auto per_shard = [&](auto&& piece) {
    std::vector<std::vector<float>> out;
    for (int k = 0; k < 2; ++k) {
      auto d_out = floats(BT);
      piece(d_out.as<float>(), d_logits[k].as<bf16>(), shards[k]);
      sync();
      out.push_back(from_device<float>(d_out, BT));
    }
    return out;
  };
  const auto maxes = per_shard([&](float* out, const bf16* x, const Shard& s) {
    vocab_parallel_row_max(out, x, BT, s.Vlocal, s.ld, stream());
  });
  std::vector<float> gmax(BT);
  for (int r = 0; r < BT; ++r) gmax[r] = std::max(maxes[0][r], maxes[1][r]);  // all-reduce MAX
  auto d_gmax = to_device(gmax);
  const auto sums = per_shard([&](float* out, const bf16* x, const Shard& s) {
    vocab_parallel_sum_exp(out, x, d_gmax.as<float>(), BT, s.Vlocal, s.ld, stream());
  });
  const auto tls = per_shard([&](float* out, const bf16* x, const Shard& s) {
    vocab_parallel_target_logit(out, x, d_targets.as<std::int32_t>(), BT, s.Vlocal, s.ld, s.v0,
                                stream());
  });
  std::vector<float> gsum(BT), gtl(BT);
  for (int r = 0; r < BT; ++r) {
    gsum[r] = sums[0][r] + sums[1][r];  // all-reduce SUM
    gtl[r] = tls[0][r] + tls[1][r];
  }
  auto d_gsum = to_device(gsum), d_gtl = to_device(gtl);
  auto d_losses = floats(BT), d_lse = floats(BT);
  vocab_parallel_loss(d_losses.as<float>(), d_lse.as<float>(), d_gmax.as<float>(),
                      d_gsum.as<float>(), d_gtl.as<float>(), BT, stream());
  for (int k = 0; k < 2; ++k) {
    vocab_parallel_cross_entropy_backward(d_logits[k].as<bf16>(), d_dlosses.as<float>(),
                                          d_lse.as<float>(), d_targets.as<std::int32_t>(), BT,
                                          shards[k].Vlocal, shards[k].ld, shards[k].v0,
                                          stream());
  }
  sync();

  // The max of the shards' maxes is the row's max: exact.
  EXPECT_EQ(gmax, row_max);
  // One shard holds the target, the other adds 0 (x + 0 = x exactly).
  for (int r = 0; r < BT; ++r) EXPECT_EQ(gtl[r], full[r * V + targets[r]]) << "row " << r;
  // fp32 shard sums added once vs the CPU's one double sum of 2003 terms: 1e-5, as for the
  // unsplit GPU kernel.
  EXPECT_TRUE(all_close("row_lse", from_device<float>(d_lse, BT), row_lse, 1e-5, 1e-5));
  EXPECT_TRUE(all_close("losses", from_device<float>(d_losses, BT), losses, 1e-5, 1e-5));
  std::vector<float> dsplit(static_cast<std::size_t>(BT) * V);
  for (int k = 0; k < 2; ++k) {
    const Shard& s = shards[k];
    const auto got = from_device_bf16(d_logits[k], static_cast<std::size_t>(BT) * s.ld);
    EXPECT_TRUE(padding_untouched(got, BT, s.Vlocal, s.ld)) << "shard " << k;
    for (int r = 0; r < BT; ++r)
      for (int j = 0; j < s.Vlocal; ++j) dsplit[r * V + s.v0 + j] = got[r * s.ld + j];
  }
  // p / BT with p >= exp(-8 - log(2003)) ~ 1.7e-7, rounded to bf16: relative 4e-3 (2^-9
  // plus the lse's 1e-5), absolute 1e-9.
  EXPECT_TRUE(all_close("dlogits", dsplit, dfull, 1e-9, 4e-3));
}

// A rank whose shard is empty (Vlocal == 0, e.g. a vocabulary smaller than the TP group):
// max -3e38 (finite, so MAX with another shard's max is that max), sum 0 and target logit 0
// (SUM with another shard's is that shard's), and a backward that writes nothing. The CPU
// twins reject Vlocal == 0, so the expected values are the header's.
TEST_F(CudaVocabParallelLoss, EmptyShardContributesNothing) {
  const int BT = 3, v0 = 5;
  const std::vector<std::int32_t> targets = {5, 0, 7};  // 5 == v0: still not in an empty shard
  for (const int ld : {0, 8}) {
    SCOPED_TRACE(::testing::Message() << "ld " << ld);
    const std::vector<float> sentinel(static_cast<std::size_t>(BT) * 8, kPadding);
    auto d_logits = to_device_bf16(sentinel);  // (BT, 8) of padding, so never null
    auto d_targets = to_device(targets), d_gmax = to_device(std::vector<float>(BT, 1.0f));
    auto d_dlosses = to_device(std::vector<float>(BT, 1.0f)),
         d_lse = to_device(std::vector<float>(BT, 2.0f));
    auto d_max = floats(BT), d_sum = floats(BT), d_tl = floats(BT);
    vocab_parallel_row_max(d_max.as<float>(), d_logits.as<bf16>(), BT, 0, ld, stream());
    vocab_parallel_sum_exp(d_sum.as<float>(), d_logits.as<bf16>(), d_gmax.as<float>(), BT, 0,
                           ld, stream());
    vocab_parallel_target_logit(d_tl.as<float>(), d_logits.as<bf16>(),
                                d_targets.as<std::int32_t>(), BT, 0, ld, v0, stream());
    vocab_parallel_cross_entropy_backward(d_logits.as<bf16>(), d_dlosses.as<float>(),
                                          d_lse.as<float>(), d_targets.as<std::int32_t>(), BT, 0,
                                          ld, v0, stream());
    sync();
    EXPECT_EQ(from_device<float>(d_max, BT), std::vector<float>(BT, -3e38f));
    EXPECT_EQ(from_device<float>(d_sum, BT), std::vector<float>(BT, 0.0f));
    EXPECT_EQ(from_device<float>(d_tl, BT), std::vector<float>(BT, 0.0f));
    EXPECT_EQ(from_device_bf16(d_logits, sentinel.size()), sentinel);
  }
}

// The whole single-shard pipeline twice on fresh copies of the same input: every output
// the same bits (fixed-order reductions, no atomics). GPT-2's padded vocabulary over two
// ranks (25152 columns, vector path: ~98 per thread) and an odd packed shard (scalar path).
TEST_F(CudaVocabParallelLoss, SecondRunIsBitIdentical) {
  struct Shape {
    int BT, Vlocal, ld, v0;
  };
  for (const Shape s : {Shape{8, 25152, 25152, 25152}, Shape{5, 1001, 1001, 0}}) {
    SCOPED_TRACE(::testing::Message() << "Vlocal " << s.Vlocal << " ld " << s.ld);
    const auto logits = rounded_bf16(random_vector(s.BT * s.ld, 14, -4.0f, 4.0f));
    std::vector<std::int32_t> targets(s.BT);
    for (int r = 0; r < s.BT; ++r) targets[r] = s.v0 + (r * 7919) % s.Vlocal;
    targets[1] = s.v0 + s.Vlocal;  // off the shard: no onehot, target logit 0
    const std::vector<float> dlosses(s.BT, 1.0f / s.BT);
    const auto run = [&] {
      auto d_logits = to_device_bf16(logits), d_targets = to_device(targets),
           d_dlosses = to_device(dlosses);
      auto d_max = floats(s.BT), d_sum = floats(s.BT), d_tl = floats(s.BT),
           d_losses = floats(s.BT), d_lse = floats(s.BT);
      vocab_parallel_row_max(d_max.as<float>(), d_logits.as<bf16>(), s.BT, s.Vlocal, s.ld,
                             stream());
      vocab_parallel_sum_exp(d_sum.as<float>(), d_logits.as<bf16>(), d_max.as<float>(), s.BT,
                             s.Vlocal, s.ld, stream());
      vocab_parallel_target_logit(d_tl.as<float>(), d_logits.as<bf16>(),
                                  d_targets.as<std::int32_t>(), s.BT, s.Vlocal, s.ld, s.v0,
                                  stream());
      vocab_parallel_loss(d_losses.as<float>(), d_lse.as<float>(), d_max.as<float>(),
                          d_sum.as<float>(), d_tl.as<float>(), s.BT, stream());
      vocab_parallel_cross_entropy_backward(d_logits.as<bf16>(), d_dlosses.as<float>(),
                                            d_lse.as<float>(), d_targets.as<std::int32_t>(),
                                            s.BT, s.Vlocal, s.ld, s.v0, stream());
      sync();
      std::vector<std::uint32_t> bits;
      for (const DeviceBuffer* b : {&d_max, &d_sum, &d_tl, &d_losses, &d_lse}) {
        const auto v = from_device<std::uint32_t>(*b, s.BT);
        bits.insert(bits.end(), v.begin(), v.end());
      }
      const auto grad = from_device<std::uint16_t>(d_logits, static_cast<std::size_t>(s.BT) * s.ld);
      bits.insert(bits.end(), grad.begin(), grad.end());
      return bits;
    };
    const auto first = run();
    EXPECT_TRUE(first == run()) << "a rerun changed some bits";
  }
}

class CudaAddBias : public CudaTest {};

// cols = 1001: the scalar path; cols = 1024: 16-byte vectors. The CPU twin adds in fp32;
// rounding its result to bf16 is exactly the device's one fp32 add and one rounding, so the
// comparison is exact.
TEST_F(CudaAddBias, MatchesCpuRoundedOnce) {
  const int rows = 7;
  for (const int cols : {1001, 1024}) {
    SCOPED_TRACE(::testing::Message() << "cols " << cols);
    const auto out = rounded_bf16(random_vector(rows * cols, 15, -4.0f, 4.0f));
    const auto bias = rounded_bf16(random_vector(cols, 16, -1.0f, 1.0f));
    auto want = out;
    cpu::add_bias(want.data(), bias.data(), rows, cols);
    for (float& x : want) x = round_bf16(x);
    auto d_out = to_device_bf16(out), d_bias = to_device_bf16(bias);
    add_bias(d_out.as<bf16>(), d_bias.as<bf16>(), rows, cols, stream());
    sync();
    EXPECT_EQ(from_device_bf16(d_out, want.size()), want);
  }
}

// ---------------------------------------------------------------------------------------
// Argument checks: no device needed. The pointers are host addresses no launcher may touch;
// a launcher that reached the runtime first would throw CudaError (no device) or launch.

using testing::Fake;
using testing::kernel_error;

#define EXPECT_KERNEL_ERROR(call, text) \
  EXPECT_NE(kernel_error([&] { call; }).find(text), std::string::npos) << #call

TEST(CudaVocabParallelLossArgs, RowMaxAndSumExpRejectNullsNegativeSizesAndShortRows) {
  Fake t;
  EXPECT_KERNEL_ERROR(vocab_parallel_row_max(nullptr, t.h(), 2, 8, 8, nullptr),
                      "vocab_parallel_row_max: tensor 'local_max' is null");
  EXPECT_KERNEL_ERROR(vocab_parallel_row_max(t.f(), nullptr, 2, 8, 8, nullptr), "'logits' is null");
  EXPECT_KERNEL_ERROR(vocab_parallel_row_max(t.f(), t.h(), -1, 8, 8, nullptr), "BT = -1");
  EXPECT_KERNEL_ERROR(vocab_parallel_row_max(t.f(), t.h(), 2, -8, 8, nullptr), "Vlocal = -8");
  EXPECT_KERNEL_ERROR(vocab_parallel_row_max(t.f(), t.h(), 2, 9, 8, nullptr),
                      "ld = 8; expected >= Vlocal = 9");
  EXPECT_KERNEL_ERROR(vocab_parallel_row_max(t.f(), t.h(), 2, 0, -1, nullptr), "ld = -1");
  EXPECT_KERNEL_ERROR(vocab_parallel_sum_exp(nullptr, t.h(), t.f(), 2, 8, 8, nullptr),
                      "'local_sum' is null");
  EXPECT_KERNEL_ERROR(vocab_parallel_sum_exp(t.f(), t.h(), nullptr, 2, 8, 8, nullptr),
                      "'global_max' is null");
  EXPECT_KERNEL_ERROR(vocab_parallel_sum_exp(t.f(), nullptr, t.f(), 2, 8, 8, nullptr),
                      "'logits' is null");
  EXPECT_KERNEL_ERROR(vocab_parallel_sum_exp(t.f(), t.h(), t.f(), -2, 8, 8, nullptr), "BT = -2");
  EXPECT_KERNEL_ERROR(vocab_parallel_sum_exp(t.f(), t.h(), t.f(), 2, 16, 8, nullptr),
                      "ld = 8; expected >= Vlocal = 16");
}

TEST(CudaVocabParallelLossArgs, TargetLogitAndLossRejectNullsAndNegativeSizes) {
  Fake t;
  EXPECT_KERNEL_ERROR(vocab_parallel_target_logit(nullptr, t.h(), t.i(), 2, 8, 8, 0, nullptr),
                      "'target_logit' is null");
  EXPECT_KERNEL_ERROR(vocab_parallel_target_logit(t.f(), t.h(), nullptr, 2, 8, 8, 0, nullptr),
                      "'targets' is null");
  EXPECT_KERNEL_ERROR(vocab_parallel_target_logit(t.f(), nullptr, t.i(), 2, 8, 8, 0, nullptr),
                      "'logits' is null");
  EXPECT_KERNEL_ERROR(vocab_parallel_target_logit(t.f(), t.h(), t.i(), 2, 8, 4, 0, nullptr),
                      "ld = 4; expected >= Vlocal = 8");
  EXPECT_KERNEL_ERROR(vocab_parallel_target_logit(t.f(), t.h(), t.i(), 2, 8, 8, -8, nullptr),
                      "v0 = -8");
  EXPECT_KERNEL_ERROR(vocab_parallel_loss(nullptr, t.f(), t.f(), t.f(), t.f(), 2, nullptr),
                      "'losses' is null");
  EXPECT_KERNEL_ERROR(vocab_parallel_loss(t.f(), nullptr, t.f(), t.f(), t.f(), 2, nullptr),
                      "'row_lse' is null");
  EXPECT_KERNEL_ERROR(vocab_parallel_loss(t.f(), t.f(), nullptr, t.f(), t.f(), 2, nullptr),
                      "'global_max' is null");
  EXPECT_KERNEL_ERROR(vocab_parallel_loss(t.f(), t.f(), t.f(), nullptr, t.f(), 2, nullptr),
                      "'global_sum' is null");
  EXPECT_KERNEL_ERROR(vocab_parallel_loss(t.f(), t.f(), t.f(), t.f(), nullptr, 2, nullptr),
                      "'target_logit' is null");
  EXPECT_KERNEL_ERROR(vocab_parallel_loss(t.f(), t.f(), t.f(), t.f(), t.f(), -1, nullptr),
                      "vocab_parallel_loss: BT = -1; expected >= 0");
}

TEST(CudaVocabParallelLossArgs, BackwardRejectsNullsNegativeSizesAndShortRows) {
  Fake t;
  const auto backward = [&](bf16* logits, const float* dlosses, const float* lse,
                            const std::int32_t* targets, int BT, int Vlocal, int ld, int v0) {
    vocab_parallel_cross_entropy_backward(logits, dlosses, lse, targets, BT, Vlocal, ld, v0,
                                          nullptr);
  };
  EXPECT_KERNEL_ERROR(backward(nullptr, t.f(), t.f(), t.i(), 2, 8, 8, 0),
                      "vocab_parallel_cross_entropy_backward: tensor 'logits' is null");
  EXPECT_KERNEL_ERROR(backward(t.h(), nullptr, t.f(), t.i(), 2, 8, 8, 0), "'dlosses' is null");
  EXPECT_KERNEL_ERROR(backward(t.h(), t.f(), nullptr, t.i(), 2, 8, 8, 0), "'row_lse' is null");
  EXPECT_KERNEL_ERROR(backward(t.h(), t.f(), t.f(), nullptr, 2, 8, 8, 0), "'targets' is null");
  EXPECT_KERNEL_ERROR(backward(t.h(), t.f(), t.f(), t.i(), -2, 8, 8, 0), "BT = -2");
  EXPECT_KERNEL_ERROR(backward(t.h(), t.f(), t.f(), t.i(), 2, -1, 8, 0), "Vlocal = -1");
  EXPECT_KERNEL_ERROR(backward(t.h(), t.f(), t.f(), t.i(), 2, 1001, 1000, 0),
                      "ld = 1000; expected >= Vlocal = 1001");
  EXPECT_KERNEL_ERROR(backward(t.h(), t.f(), t.f(), t.i(), 2, 8, 8, -1), "v0 = -1");
}

TEST(CudaVocabParallelLossArgs, AddBiasRejectsNullsAndNegativeSizes) {
  Fake t;
  EXPECT_KERNEL_ERROR(add_bias(nullptr, t.h(), 2, 8, nullptr), "add_bias: tensor 'out' is null");
  EXPECT_KERNEL_ERROR(add_bias(t.h(), nullptr, 2, 8, nullptr), "'bias' is null");
  EXPECT_KERNEL_ERROR(add_bias(t.h(), t.h(), -2, 8, nullptr), "rows = -2");
  EXPECT_KERNEL_ERROR(add_bias(t.h(), t.h(), 2, -8, nullptr), "cols = -8");
}

// Nothing to compute is accepted and launches nothing (without a device a launch would
// throw CudaError): BT == 0 for every piece, an empty shard's backward, empty add_bias.
TEST(CudaVocabParallelLossArgs, EmptyWorkLaunchesNothing) {
  Fake t;
  EXPECT_NO_THROW(vocab_parallel_row_max(t.f(), t.h(), 0, 8, 8, nullptr));
  EXPECT_NO_THROW(vocab_parallel_sum_exp(t.f(), t.h(), t.f(), 0, 8, 8, nullptr));
  EXPECT_NO_THROW(vocab_parallel_target_logit(t.f(), t.h(), t.i(), 0, 8, 8, 0, nullptr));
  EXPECT_NO_THROW(vocab_parallel_loss(t.f(), t.f(), t.f(), t.f(), t.f(), 0, nullptr));
  EXPECT_NO_THROW(vocab_parallel_cross_entropy_backward(t.h(), t.f(), t.f(), t.i(), 0, 8, 8, 0,
                                                        nullptr));
  EXPECT_NO_THROW(vocab_parallel_cross_entropy_backward(t.h(), t.f(), t.f(), t.i(), 4, 0, 0, 0,
                                                        nullptr));
  EXPECT_NO_THROW(add_bias(t.h(), t.h(), 0, 8, nullptr));
  EXPECT_NO_THROW(add_bias(t.h(), t.h(), 8, 0, nullptr));
}

}  // namespace
}  // namespace strata::kernels::cuda
