// Grouped-query attention on the GPU (attention.h's KVH overloads) against its CPU twin, the
// tiled CPU kernel's KVH overloads (kernels/cpu/flash_attention.h), on bf16-rounded random
// qkv in the [q (NH) | k (KVH) | v (KVH)] layout: both compiled head sizes, groups of 2, 4
// and 8 (multi-query), T = 1 at both head sizes, T below, across and at many of the 64-row
// tiles; each case with the buffers the kernels write starting as NaN, as garbage, and
// unwritten (for compute-sanitizer's initcheck). Also:
// backward accumulates and overwrites, and forward and backward are bit-identical across runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/flash_attention.h"
#include "kernels/cuda/attention.h"
#include "tests/kernels/attention_grad_metric.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/gqa_shape.h"
#include "tests/kernels/grad_check.h"

namespace strata::kernels::cuda {
namespace {

using strata::kernels::testing::all_close;
using strata::kernels::testing::GqaShape;
using strata::kernels::testing::qkv_parts;
using strata::kernels::testing::worst_part_relative_norm;
using strata::kernels::testing::random_vector;
using testing::CudaTest;
using testing::Prefill;
using testing::prefilled;
using testing::from_device;
using testing::from_device_bf16;
using testing::rounded_bf16;
using testing::to_device_bf16;

class CudaGqaAttention : public CudaTest,
                         public ::testing::WithParamInterface<std::tuple<GqaShape, Prefill>> {};

// Every buffer a kernel writes (out, lse, the backward's scratch, dqkv in overwrite mode)
// starts as NaN, or as garbage: a kernel that reads what it has not written, or leaves an
// element unwritten, fails. And once unwritten, for compute-sanitizer's initcheck (the GPU
// check's sanitize phase), which reports a read of memory no one wrote.
TEST_P(CudaGqaAttention, ForwardAndBackwardMatchCpuTwin) {
  const auto [s, fill] = GetParam();
  const int C = s.C();
  const auto qkv = rounded_bf16(random_vector(s.qkv_size(), 41));
  const auto dout = rounded_bf16(random_vector(s.out_size(), 42));
  const auto dqkv0 = rounded_bf16(random_vector(s.qkv_size(), 43, -0.1f, 0.1f));  // prefilled

  std::vector<float> out(s.out_size()), lse(s.lse_size());
  cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, C, s.NH, s.KVH);
  auto dqkv = dqkv0;
  std::vector<float> cpu_scratch(cpu::flash_attention_backward_scratch_floats(s.B, s.T, s.NH));
  cpu::flash_attention_backward(dqkv.data(), cpu_scratch.data(), dout.data(), qkv.data(),
                                out.data(), lse.data(), s.B, s.T, C, s.NH, s.KVH);

  auto d_qkv = to_device_bf16(qkv), d_dout = to_device_bf16(dout), d_dqkv = to_device_bf16(dqkv0);
  DeviceBuffer d_out = prefilled(s.out_size() * sizeof(bf16), fill),
               d_lse = prefilled(s.lse_size() * sizeof(float), fill),
               d_scratch = prefilled(attention_backward_scratch_floats(s.B, s.T, s.NH) * sizeof(float), fill);
  attention_forward(d_out.as<bf16>(), d_lse.as<float>(), d_qkv.as<bf16>(), s.B, s.T, C, s.NH,
                    s.KVH, stream());
  attention_backward(d_dqkv.as<bf16>(), d_scratch.as<float>(), d_dout.as<bf16>(),
                     d_qkv.as<bf16>(), d_out.as<bf16>(), d_lse.as<float>(), s.B, s.T, C, s.NH,
                     s.KVH, stream());
  sync();
  // As cuda_attention_test: outputs are convex combinations of v in [-1, 1] rounded to bf16:
  // 1e-2. lse: fp32 online softmax on both sides, scores <= sqrt(HS): 1e-4.
  EXPECT_TRUE(all_close("out", from_device_bf16(d_out, s.out_size()), out, 1e-2, 1e-2));
  EXPECT_TRUE(all_close("lse", from_device<float>(d_lse, s.lse_size()), lse, 1e-4, 1e-4));
  // Gradients: bf16 P, dS and out (for D) operands, ~2^-9 relative per term with random signs,
  // summed over up to T keys, and dk, dv over the group's NH / KVH heads too (sqrt(8) ~ 3
  // times the per-head error at most); 3e-2 absolute as for one head, 2e-2 relative.
  EXPECT_TRUE(all_close("dqkv", from_device_bf16(d_dqkv, s.qkv_size()), dqkv, 3e-2, 2e-2));

  // overwrite: the buffer starts as NaN or garbage so a missed element shows; the CPU from 0.
  std::vector<float> fresh(s.qkv_size(), 0.0f);
  cpu::flash_attention_backward(fresh.data(), cpu_scratch.data(), dout.data(), qkv.data(),
                                out.data(), lse.data(), s.B, s.T, C, s.NH, s.KVH);
  auto d_fresh = prefilled(s.qkv_size() * sizeof(bf16), fill);
  attention_backward(d_fresh.as<bf16>(), d_scratch.as<float>(), d_dout.as<bf16>(),
                     d_qkv.as<bf16>(), d_out.as<bf16>(), d_lse.as<float>(), s.B, s.T, C, s.NH,
                     s.KVH, stream(), /*overwrite=*/true);
  sync();
  const auto overwritten = from_device_bf16(d_fresh, s.qkv_size());
  EXPECT_TRUE(all_close("dqkv overwritten", overwritten, fresh, 3e-2, 2e-2));
  // Per part, by norm (attention_grad_metric.h: at T = 1 dq and dk are zero analytically and
  // judged against the whole): bf16 operands round each term by up to 2^-9 (2e-3) with random
  // signs, so a part's error norm is a few 1e-3 of its norm (cuda_attention_test's bound).
  std::string worst_part;
  EXPECT_LE(worst_part_relative_norm(overwritten, fresh, s.B, s.T,
                                     std::size_t(s.NH + 2 * s.KVH) * s.HS,
                                     qkv_parts(s.T, s.C(), std::size_t(s.KVH) * s.HS, false),
                                     &worst_part),
            1e-2) << worst_part;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaGqaAttention,
    ::testing::Combine(::testing::Values(GqaShape{64, 2, 70, 4, 2}, GqaShape{128, 2, 70, 4, 1},
                                         GqaShape{64, 1, 129, 8, 1}, GqaShape{128, 1, 1, 8, 2},
                                         GqaShape{64, 1, 1, 8, 2}, GqaShape{128, 1, 129, 8, 2},
                                         GqaShape{64, 1, 1024, 8, 2}),
                       ::testing::Values(Prefill::kNaN, Prefill::kGarbage, Prefill::kUnwritten)),
    [](const ::testing::TestParamInfo<std::tuple<GqaShape, Prefill>>& info) {
      const GqaShape& s = std::get<0>(info.param);
      return "HS" + std::to_string(s.HS) + "_B" + std::to_string(s.B) + "_T" +
             std::to_string(s.T) + "_NH" + std::to_string(s.NH) + "_KVH" +
             std::to_string(s.KVH) + "_" + testing::to_string(std::get<1>(info.param));
    });

class CudaGqaAttentionRuns : public CudaTest {};

TEST_F(CudaGqaAttentionRuns, ForwardAndBackwardAreBitIdenticalAcrossRuns) {
  constexpr int B = 2, T = 1000, NH = 8, KVH = 2, HS = 64, C = NH * HS;
  constexpr std::size_t qkv_size = std::size_t(B) * T * (NH + 2 * KVH) * HS;
  auto d_qkv = to_device_bf16(random_vector(qkv_size, 44));
  auto d_dout = to_device_bf16(random_vector(std::size_t(B) * T * C, 45));
  DeviceBuffer d_out(std::size_t(B) * T * C * sizeof(bf16)),
      d_lse(std::size_t(B) * NH * T * sizeof(float)),
      d_scratch(attention_backward_scratch_floats(B, T, NH) * sizeof(float)),
      d_dqkv(qkv_size * sizeof(bf16));
  std::vector<std::vector<float>> grads;
  for (int r = 0; r < 2; ++r) {
    attention_forward(d_out.as<bf16>(), d_lse.as<float>(), d_qkv.as<bf16>(), B, T, C, NH, KVH,
                      stream());
    attention_backward(d_dqkv.as<bf16>(), d_scratch.as<float>(), d_dout.as<bf16>(),
                       d_qkv.as<bf16>(), d_out.as<bf16>(), d_lse.as<float>(), B, T, C, NH, KVH,
                       stream(), /*overwrite=*/true);
    sync();
    grads.push_back(from_device_bf16(d_dqkv, qkv_size));
  }
  EXPECT_EQ(grads[0], grads[1]);
  EXPECT_TRUE(std::any_of(grads[0].begin(), grads[0].end(), [](float g) { return g != 0.0f; }));
}

}  // namespace
}  // namespace strata::kernels::cuda
