// Fused cross-entropy and multi-tensor AdamW / sum of squares on the GPU against the CPU
// twins (kernels/cpu/cross_entropy.h, kernels/cpu/adamw.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/cross_entropy.h"
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

class CudaCrossEntropy : public CudaTest {};

TEST_F(CudaCrossEntropy, ForwardAndInPlaceBackwardMatchCpu) {
  const int BT = 5, V = 1001;  // V not a multiple of the 256 threads
  const auto logits = rounded_bf16(random_vector(BT * V, 1, -4.0f, 4.0f));
  const std::vector<std::int32_t> targets = {0, 1000, 17, 500, 17};
  const std::vector<float> dlosses(BT, 1.0f / BT);  // mean loss
  std::vector<float> losses(BT), row_max(BT), row_lse(BT), dlogits(BT * V, 0.0f);
  cpu::cross_entropy_forward(losses.data(), row_max.data(), row_lse.data(), logits.data(),
                             targets.data(), BT, V);
  cpu::cross_entropy_backward(dlogits.data(), dlosses.data(), logits.data(), row_lse.data(),
                              targets.data(), BT, V);

  auto d_logits = to_device_bf16(logits), d_targets = to_device(targets),
       d_dlosses = to_device(dlosses);
  DeviceBuffer d_losses(BT * sizeof(float)), d_max(BT * sizeof(float)), d_lse(BT * sizeof(float));
  cross_entropy_forward(d_losses.as<float>(), d_max.as<float>(), d_lse.as<float>(),
                        d_logits.as<bf16>(), d_targets.as<std::int32_t>(), BT, V, stream());
  // In place: dlogits overwrite the logits.
  cross_entropy_backward(d_logits.as<bf16>(), d_dlosses.as<float>(), d_logits.as<bf16>(),
                         d_lse.as<float>(), d_targets.as<std::int32_t>(), BT, V, stream());
  sync();
  // Same bf16 inputs; fp32 online sums vs the CPU's double sums of ~1000 terms: 1e-5.
  EXPECT_TRUE(all_close("losses", from_device<float>(d_losses, BT), losses, 1e-5, 1e-5));
  EXPECT_EQ(from_device<float>(d_max, BT), row_max);  // a max is exact
  EXPECT_TRUE(all_close("row_lse", from_device<float>(d_lse, BT), row_lse, 1e-5, 1e-5));
  // dlogits ~ p / BT with p ~ 1e-3, rounded to bf16: relative 1e-2, absolute 1e-6.
  EXPECT_TRUE(all_close("dlogits", from_device_bf16(d_logits, BT * V), dlogits, 1e-6, 1e-2));
}

// A padded vocabulary: rows of ld = 1024 > V = 1001 with large values in the padding
// columns must give exactly the packed results, and the backward must leave the padding alone.
TEST_F(CudaCrossEntropy, PaddedRowsIgnoreThePaddingColumns) {
  const int BT = 4, V = 1001, ld = 1024;
  const auto packed = rounded_bf16(random_vector(BT * V, 5, -4.0f, 4.0f));
  std::vector<float> padded(static_cast<std::size_t>(BT) * ld, 50.0f);  // would dominate a softmax
  for (int r = 0; r < BT; ++r)
    for (int j = 0; j < V; ++j) padded[r * ld + j] = packed[r * V + j];
  const std::vector<std::int32_t> targets = {3, 1000, 0, 77};
  const std::vector<float> dlosses(BT, 0.25f);
  auto d_packed = to_device_bf16(packed), d_padded = to_device_bf16(padded);
  auto d_targets = to_device(targets), d_dlosses = to_device(dlosses);
  DeviceBuffer a_loss(BT * 4), a_max(BT * 4), a_lse(BT * 4), b_loss(BT * 4), b_max(BT * 4),
      b_lse(BT * 4);
  cross_entropy_forward(a_loss.as<float>(), a_max.as<float>(), a_lse.as<float>(),
                        d_packed.as<bf16>(), d_targets.as<std::int32_t>(), BT, V, stream());
  cross_entropy_forward(b_loss.as<float>(), b_max.as<float>(), b_lse.as<float>(),
                        d_padded.as<bf16>(), d_targets.as<std::int32_t>(), BT, V, stream(), ld);
  cross_entropy_backward(d_packed.as<bf16>(), d_dlosses.as<float>(), d_packed.as<bf16>(),
                         a_lse.as<float>(), d_targets.as<std::int32_t>(), BT, V, stream());
  cross_entropy_backward(d_padded.as<bf16>(), d_dlosses.as<float>(), d_padded.as<bf16>(),
                         b_lse.as<float>(), d_targets.as<std::int32_t>(), BT, V, stream(), ld);
  sync();
  EXPECT_EQ(from_device<float>(b_loss, BT), from_device<float>(a_loss, BT));
  const auto got = from_device_bf16(d_padded, BT * ld);
  const auto want = from_device_bf16(d_packed, BT * V);
  for (int r = 0; r < BT; ++r) {
    for (int j = 0; j < ld; ++j) {
      const float expected = j < V ? want[r * V + j] : 50.0f;  // padding untouched
      ASSERT_EQ(got[r * ld + j], expected) << "row " << r << " column " << j;
    }
  }
}

TEST_F(CudaCrossEntropy, Fp32LogitsMatchCpu) {
  const int BT = 3, V = 300;
  const auto logits = random_vector(BT * V, 2, -4.0f, 4.0f);
  const std::vector<std::int32_t> targets = {299, 0, 150};
  std::vector<float> losses(BT), row_max(BT), row_lse(BT);
  cpu::cross_entropy_forward(losses.data(), row_max.data(), row_lse.data(), logits.data(),
                             targets.data(), BT, V);
  auto d_logits = to_device(logits), d_targets = to_device(targets);
  DeviceBuffer d_losses(BT * sizeof(float)), d_max(BT * sizeof(float)), d_lse(BT * sizeof(float));
  cross_entropy_forward(d_losses.as<float>(), d_max.as<float>(), d_lse.as<float>(),
                        d_logits.as<float>(), d_targets.as<std::int32_t>(), BT, V, stream());
  sync();
  EXPECT_TRUE(all_close("losses", from_device<float>(d_losses, BT), losses, 1e-5, 1e-5));
}

// The one-pass kernel against the CPU pair, on the shapes that take each path: GPT-2's
// padded vocabulary (50257 in rows of 50304: 8 register slots per thread), a small padded row
// (one slot) and packed rows of odd length (ld % 8 != 0: the two-kernel fallback).
TEST_F(CudaCrossEntropy, ForwardBackwardInOnePassMatchesCpu) {
  struct Shape {
    int BT, V, ld;
  };
  for (const Shape shape : {Shape{3, 50257, 50304}, Shape{5, 1001, 1008}, Shape{4, 1001, 1001}}) {
    const int BT = shape.BT, V = shape.V, ld = shape.ld;
    SCOPED_TRACE(::testing::Message() << "BT " << BT << " V " << V << " ld " << ld);
    const auto packed = rounded_bf16(random_vector(BT * V, 7, -4.0f, 4.0f));
    std::vector<float> padded(static_cast<std::size_t>(BT) * ld, 50.0f);  // would dominate
    for (int r = 0; r < BT; ++r)
      for (int j = 0; j < V; ++j) padded[r * ld + j] = packed[r * V + j];
    std::vector<std::int32_t> targets(BT);
    for (int r = 0; r < BT; ++r) targets[r] = (r * 7919) % V;
    targets[0] = V - 1;  // the last real column sits in the vector that straddles V
    const std::vector<float> dlosses(BT, 1.0f / BT);
    std::vector<float> losses(BT), row_max(BT), row_lse(BT), dlogits(BT * V, 0.0f);
    cpu::cross_entropy_forward(losses.data(), row_max.data(), row_lse.data(), packed.data(),
                               targets.data(), BT, V);
    cpu::cross_entropy_backward(dlogits.data(), dlosses.data(), packed.data(), row_lse.data(),
                                targets.data(), BT, V);

    auto d_logits = to_device_bf16(padded), d_targets = to_device(targets),
         d_dlosses = to_device(dlosses);
    DeviceBuffer d_losses(BT * 4), d_max(BT * 4), d_lse(BT * 4);
    cross_entropy_forward_backward(d_losses.as<float>(), d_max.as<float>(), d_lse.as<float>(),
                                   d_logits.as<bf16>(), d_dlosses.as<float>(),
                                   d_targets.as<std::int32_t>(), BT, V, stream(), ld);
    sync();
    // fp32 block sums of up to 50257 exponentials vs the CPU's double sums: 1e-5.
    EXPECT_TRUE(all_close("losses", from_device<float>(d_losses, BT), losses, 1e-5, 1e-5));
    EXPECT_EQ(from_device<float>(d_max, BT), row_max);  // a max is exact
    EXPECT_TRUE(all_close("row_lse", from_device<float>(d_lse, BT), row_lse, 1e-5, 1e-5));
    const auto got = from_device_bf16(d_logits, static_cast<std::size_t>(BT) * ld);
    std::vector<float> got_packed(static_cast<std::size_t>(BT) * V);
    for (int r = 0; r < BT; ++r) {
      for (int j = 0; j < V; ++j) got_packed[r * V + j] = got[r * ld + j];
      for (int j = V; j < ld; ++j) {
        ASSERT_EQ(got[r * ld + j], 50.0f) << "padding touched: row " << r << " column " << j;
      }
    }
    // p / BT with p down to 1e-25, rounded to bf16: relative 1e-2 (bf16 has 8 bits), absolute
    // 1e-7 for the smallest probabilities.
    EXPECT_TRUE(all_close("dlogits", got_packed, dlogits, 1e-7, 1e-2));
  }
}

class CudaAdamW : public CudaTest {};

// Sizes include an empty tensor (skipped by the offsets search) and a list longer than one
// launch's kAdamWTensorsPerLaunch = 48.
TEST_F(CudaAdamW, MultiTensorUpdateMatchesCpuAndWritesBf16Copies) {
  std::vector<std::int64_t> sizes = {1000, 0, 777};
  for (int i = 0; i < 50; ++i) sizes.push_back(1 + 13 * i);
  const AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  const int step = 3;
  const float grad_scale = 0.5f;

  struct HostTensor {
    std::vector<float> p, g, m, v;
  };
  std::vector<HostTensor> host;
  std::vector<DeviceBuffer> bufs;  // p, g, m, v, p16 per tensor
  std::vector<AdamWTensor> list;
  std::uint32_t seed = 100;
  for (std::int64_t n : sizes) {
    HostTensor h{random_vector(n, seed++), random_vector(n, seed++),
                 random_vector(n, seed++, -0.01f, 0.01f), random_vector(n, seed++, 0.0f, 0.01f)};
    bufs.push_back(to_device(h.p));
    bufs.push_back(to_device(h.g));
    bufs.push_back(to_device(h.m));
    bufs.push_back(to_device(h.v));
    bufs.emplace_back(static_cast<std::size_t>(n) * sizeof(bf16));
    const std::size_t k = bufs.size() - 5;
    list.push_back({bufs[k].as<float>(), bufs[k + 1].as<float>(), bufs[k + 2].as<float>(),
                    bufs[k + 3].as<float>(), bufs[k + 4].as<bf16>(), n});
    // The CPU reference applies the same scale to its gradient first.
    for (float& g : h.g) g *= grad_scale;
    // (An empty std::vector's data() is null, which the CPU kernel rightly rejects.)
    if (n > 0) cpu::adamw_update(h.p.data(), h.g.data(), h.m.data(), h.v.data(), n, hp, step);
    host.push_back(std::move(h));
  }
  adamw_update(list, hp, step, grad_scale, stream());
  sync();
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const std::size_t n = static_cast<std::size_t>(sizes[t]);
    SCOPED_TRACE(::testing::Message() << "tensor " << t << " of " << n << " elements");
    // Same fp32 formula and per-step constants; the GPU may contract to FMAs: a few ulp.
    const auto p = from_device<float>(bufs[5 * t], n);
    EXPECT_TRUE(all_close("param", p, host[t].p, 1e-7, 1e-6));
    EXPECT_TRUE(all_close("m", from_device<float>(bufs[5 * t + 2], n), host[t].m, 1e-9, 1e-6));
    EXPECT_TRUE(all_close("v", from_device<float>(bufs[5 * t + 3], n), host[t].v, 1e-12, 1e-6));
    // The bf16 copy is exactly the device's fp32 result rounded to nearest even.
    auto p16_expected = p;
    for (float& x : p16_expected) x = round_bf16(x);
    EXPECT_EQ(from_device_bf16(bufs[5 * t + 4], n), p16_expected);
  }
}

TEST_F(CudaAdamW, SumOfSquaresMatchesCpuAndAccumulates) {
  const std::int64_t n = 300001;  // > 256 blocks x 256 threads: grid-stride loop runs
  const auto x = random_vector(n, 7);
  auto d_x = to_device(x);
  DeviceBuffer result(sizeof(double)), scratch(kSumOfSquaresScratchDoubles * sizeof(double));
  CUDA_CHECK(cudaMemsetAsync(result.get(), 0, sizeof(double), stream()));
  sum_of_squares(result.as<double>(), scratch.as<double>(), d_x.as<float>(), n, stream());
  sync();
  const double once = from_device<double>(result, 1)[0];
  // Both sum the same squares in double, in different orders: relative 1e-12.
  EXPECT_NEAR(once, cpu::sum_of_squares(x.data(), n), 1e-12 * once);
  sum_of_squares(result.as<double>(), scratch.as<double>(), d_x.as<float>(), n, stream());
  sync();
  // Accumulates: the second call adds the same bits again (x + x is exact in binary).
  EXPECT_EQ(from_device<double>(result, 1)[0], 2.0 * once);
}

}  // namespace
}  // namespace strata::kernels::cuda
