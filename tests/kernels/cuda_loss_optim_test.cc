// Fused cross-entropy and multi-tensor AdamW / sum of squares on the GPU against the CPU
// twins (kernels/cpu/cross_entropy.h, kernels/cpu/adamw.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
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

// Index of the first element whose bits differ (-1: none), so a failure names it.
std::int64_t first_bit_difference(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) return static_cast<std::int64_t>(i);
  }
  return -1;
}

// The fused launch against its CPU twin composed as the CPU backend runs a step
// (executor/cpu/cpu_backend.cc): the gradient times the clip scale, kernels/cpu/adamw.h's
// update with the tensor's weight decay (0 when not decayed), the copy rounded to bf16.
// Expected bits, not a tolerance: the kernel rounds each operation once in the twin's order
// (no FMA contraction; IEEE division and square root, as the CPU's), from the same per-step
// constants, so p, m and v are the twin's fp32 bits, and the copy is round-to-nearest-even
// of p (round_bf16). Sizes: one element, a tile less one, a tile (kAdamWTile = 1024) and one
// more, several tiles and a bit, an empty tensor (no tiles: the tile lookup must skip it),
// then enough small tensors to need a second launch (kAdamWTensorsPerLaunch = 320); decay
// and the bf16 copy alternate. The bf16 outputs start as NaN, so an element left unwritten
// fails.
TEST_F(CudaAdamW, FusedUpdateGivesTheCpuTwinsBitsAndTheirBf16Rounding) {
  std::vector<std::int64_t> sizes = {1, 1023, 1024, 1025, 3 * 1024 + 5, 0, 70001};
  for (int i = 0; i < kAdamWTensorsPerLaunch; ++i) sizes.push_back(1 + 7 * i);
  const AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  const int step = 3;
  const float grad_scale = 0.37f;  // a clip factor whose products round

  struct HostTensor {
    std::vector<float> p, g, m, v;
  };
  std::vector<HostTensor> host;
  std::vector<DeviceBuffer> bufs;  // p, g, m, v, p16 per tensor
  std::vector<AdamWTensor> list;
  std::uint32_t seed = 100;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const std::int64_t n = sizes[t];
    const bool decayed = t % 2 == 0;
    const bool copy = t % 3 != 1;
    HostTensor h{random_vector(n, seed++), random_vector(n, seed++),
                 random_vector(n, seed++, -0.01f, 0.01f), random_vector(n, seed++, 0.0f, 0.01f)};
    bufs.push_back(to_device(h.p));
    bufs.push_back(to_device(h.g));
    bufs.push_back(to_device(h.m));
    bufs.push_back(to_device(h.v));
    bufs.push_back(to_device_bf16(std::vector<float>(n, std::nanf(""))));
    const std::size_t k = bufs.size() - 5;
    list.push_back({bufs[k].as<float>(), bufs[k + 1].as<float>(), bufs[k + 2].as<float>(),
                    bufs[k + 3].as<float>(), copy ? bufs[k + 4].as<bf16>() : nullptr, n,
                    decayed});
    for (float& g : h.g) g *= grad_scale;
    AdamWParams tensor_hp = hp;
    if (!decayed) tensor_hp.weight_decay = 0.0f;
    // (An empty std::vector's data() is null, which the CPU kernel rightly rejects.)
    if (n > 0) cpu::adamw_update(h.p.data(), h.g.data(), h.m.data(), h.v.data(), n, tensor_hp, step);
    host.push_back(std::move(h));
  }
  EXPECT_EQ(adamw_launches(list), 2);  // 6 + 320 non-empty tensors, 320 a launch
  adamw_update(list, hp, step, grad_scale, stream());
  sync();
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const std::size_t n = static_cast<std::size_t>(sizes[t]);
    SCOPED_TRACE(::testing::Message() << "tensor " << t << " of " << n << " elements");
    const auto p = from_device<float>(bufs[5 * t], n);
    EXPECT_EQ(first_bit_difference(p, host[t].p), -1) << "param";
    EXPECT_EQ(first_bit_difference(from_device<float>(bufs[5 * t + 2], n), host[t].m), -1) << "m";
    EXPECT_EQ(first_bit_difference(from_device<float>(bufs[5 * t + 3], n), host[t].v), -1) << "v";
    if (list[t].param_bf16 != nullptr) {
      EXPECT_EQ(first_bit_difference(from_device_bf16(bufs[5 * t + 4], n),
                                     rounded_bf16(host[t].p)), -1) << "bf16 copy";
    }
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

// A captured step's form: lr, the bias corrections and the clip factor read from device memory
// (AdamWStepValues), hp's lr ignored. Expected: the bits of the launch that takes them as
// arguments (adamw_update, which the test above ties to the CPU twin's bits): the kernel
// computes from the same four floats, the bias corrections rounded once on the host as
// adamw_update's launcher rounds them (cpu::adamw_bias_correction). hp.lr is 0 here, so a
// kernel that took the argument would move nothing.
TEST_F(CudaAdamW, UpdateFromDeviceValuesGivesTheArgumentLaunchsBits) {
  const std::vector<std::int64_t> sizes = {1, 1025, 70001};
  const AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  const int step = 3;
  const float grad_scale = 0.37f;
  std::vector<DeviceBuffer> by_args, by_values;  // p, g, m, v, p16 per tensor
  std::vector<AdamWTensor> args_list, values_list;
  std::uint32_t seed = 300;
  const auto add = [](std::vector<DeviceBuffer>& bufs, std::vector<AdamWTensor>& list,
                      const std::vector<float>& p, const std::vector<float>& g,
                      const std::vector<float>& m, const std::vector<float>& v) {
    for (const auto* x : {&p, &g, &m, &v}) bufs.push_back(to_device(*x));
    bufs.push_back(to_device_bf16(std::vector<float>(p.size(), std::nanf(""))));
    const std::size_t k = bufs.size() - 5;
    list.push_back({bufs[k].as<float>(), bufs[k + 1].as<float>(), bufs[k + 2].as<float>(),
                    bufs[k + 3].as<float>(), bufs[k + 4].as<bf16>(),
                    static_cast<std::int64_t>(p.size()), true});
  };
  for (std::int64_t n : sizes) {
    const auto p = random_vector(n, seed++), g = random_vector(n, seed++);
    const auto m = random_vector(n, seed++, -0.01f, 0.01f);
    const auto v = random_vector(n, seed++, 0.0f, 0.01f);
    add(by_args, args_list, p, g, m, v);
    add(by_values, values_list, p, g, m, v);
  }
  const AdamWStepValues written{grad_scale, hp.lr, cpu::adamw_bias_correction(hp.beta1, step),
                                cpu::adamw_bias_correction(hp.beta2, step)};
  DeviceBuffer values(sizeof(AdamWStepValues));
  CUDA_CHECK(cudaMemcpy(values.get(), &written, sizeof written, cudaMemcpyHostToDevice));
  adamw_update(args_list, hp, step, grad_scale, stream());
  AdamWParams no_lr = hp;
  no_lr.lr = 0.0f;
  adamw_update_from_device(values_list, no_lr, values.as<AdamWStepValues>(), stream());
  sync();
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const auto n = static_cast<std::size_t>(sizes[t]);
    SCOPED_TRACE(::testing::Message() << "tensor " << t << " of " << n << " elements");
    for (int a : {0, 2, 3}) {  // p, m, v
      EXPECT_EQ(first_bit_difference(from_device<float>(by_values[5 * t + a], n),
                                     from_device<float>(by_args[5 * t + a], n)), -1) << a;
    }
    EXPECT_EQ(first_bit_difference(from_device_bf16(by_values[5 * t + 4], n),
                                   from_device_bf16(by_args[5 * t + 4], n)), -1) << "bf16 copy";
  }
}

// The clip factor taken on the device. Expected: grad_sq is the host's sum of each group's
// device sum (each group summed from 0 by sum_of_squares, the groups added in order in double:
// the same additions, so the same bits), and grad_scale is cpu::clip_scale of its square root
// (IEEE double sqrt and division on both sides, one rounding to float). The clip is half the
// norm, so the factor is about 0.5 and its rounding matters; max_norm 0 gives 1.
TEST_F(CudaAdamW, NormAndClipScaleOnDeviceAreTheHostsOfTheGroupsSums) {
  const std::vector<std::vector<std::int64_t>> group_sizes = {{1000, 3}, {}, {300001}, {7, 70001, 1}};
  std::vector<DeviceBuffer> bufs;
  std::vector<std::vector<SquaredSpan>> groups;
  std::uint32_t seed = 500;
  for (const auto& sizes : group_sizes) {
    std::vector<SquaredSpan>& group = groups.emplace_back();
    for (std::int64_t n : sizes) {
      bufs.push_back(to_device(random_vector(n, seed++)));
      group.push_back({bufs.back().as<float>(), n});
    }
  }
  DeviceBuffer part(sizeof(double)), scratch((1 + kSumOfSquaresScratchDoubles) * sizeof(double));
  double want_sq = 0;
  for (const auto& group : groups) {
    CUDA_CHECK(cudaMemsetAsync(part.get(), 0, sizeof(double), stream()));
    for (const SquaredSpan& x : group) {
      sum_of_squares(part.as<double>(), scratch.as<double>() + 1, x.x, x.n, stream());
    }
    sync();
    want_sq += from_device<double>(part, 1)[0];
  }
  const float max_norm = static_cast<float>(std::sqrt(want_sq) / 2);
  DeviceBuffer sq(sizeof(double)), scale(sizeof(float));
  sum_of_squares_groups(sq.as<double>(), groups, scratch.as<double>(), stream());
  sync();
  EXPECT_EQ(from_device<double>(sq, 1)[0], want_sq);
  for (const float clip : {max_norm, 0.0f}) {
    SCOPED_TRACE(::testing::Message() << "max_norm " << clip);
    clip_scale_from_sum(scale.as<float>(), sq.as<double>(), clip, stream());
    sync();
    EXPECT_EQ(from_device<float>(scale, 1)[0], cpu::clip_scale(std::sqrt(want_sq), clip));
  }
}

}  // namespace
}  // namespace strata::kernels::cuda
