// Tensor-core causal attention on the GPU against the materialised CPU reference
// (kernels/cpu/attention.h) for both compiled head sizes, on bf16-rounded random qkv. The
// kernels tile by 64 rows (and 64 or 32 streamed keys/queries): T = 70 leaves a partial second
// tile, T = 1 a single row, T = 64 exactly one full tile, T = 129 one row past two tiles and
// T = 1024 sixteen full tiles (the fast, unmasked path of the GPT-2 shapes).
// Every case three times: the buffers the kernels write start as NaN, as garbage, and
// unwritten (for compute-sanitizer's initcheck). Also: backward
// accumulates onto prefilled dqkv, and forward and backward are bit-identical across runs (no
// atomics).
#include "kernels/cuda/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/attention.h"
#include "tests/kernels/attention_grad_metric.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/grad_check.h"

namespace strata::kernels::cuda {
namespace {

using strata::kernels::testing::all_close;
using strata::kernels::testing::qkv_parts;
using strata::kernels::testing::worst_part_relative_norm;
using strata::kernels::testing::random_vector;
using testing::CudaTest;
using testing::Prefill;
using testing::prefilled;
using testing::from_device;
using testing::from_device_bf16;
using testing::rounded_bf16;
using testing::to_device;
using testing::to_device_bf16;

struct Shape {
  int HS, B, T, NH;
};

// lse[b, h, t] = log sum_{t2 <= t} exp(q_t . k_t2 / sqrt(HS)), in double.
std::vector<float> naive_lse(const std::vector<float>& qkv, int B, int T, int NH, int C) {
  const int HS = C / NH;
  std::vector<float> lse(B * NH * T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        std::vector<double> s(t + 1);
        double mx = -INFINITY;
        for (int t2 = 0; t2 <= t; ++t2) {
          double dot = 0.0;
          for (int d = 0; d < HS; ++d) {
            dot += double{qkv[(b * T + t) * 3 * C + h * HS + d]} *
                   qkv[(b * T + t2) * 3 * C + C + h * HS + d];
          }
          s[t2] = dot / std::sqrt(double(HS));
          mx = std::max(mx, s[t2]);
        }
        double sum = 0.0;
        for (double v : s) sum += std::exp(v - mx);
        lse[(b * NH + h) * T + t] = static_cast<float>(mx + std::log(sum));
      }
  return lse;
}

class CudaAttention : public CudaTest,
                      public ::testing::WithParamInterface<std::tuple<Shape, Prefill>> {};

// Every buffer a kernel writes (out, lse, the backward's scratch, dqkv in overwrite mode)
// starts as NaN, or as garbage: a kernel that reads what it has not written, or leaves an
// element unwritten, fails. And once unwritten, for compute-sanitizer's initcheck (the GPU
// check's sanitize phase), which reports a read of memory no one wrote.
TEST_P(CudaAttention, ForwardAndBackwardMatchCpu) {
  const auto [shape, fill] = GetParam();
  const auto [HS, B, T, NH] = shape;
  const int C = NH * HS;
  const auto qkv = rounded_bf16(random_vector(B * T * 3 * C, 1));
  const auto dout = rounded_bf16(random_vector(B * T * C, 2));
  const auto dqkv0 = rounded_bf16(random_vector(B * T * 3 * C, 3, -0.1f, 0.1f));  // prefilled

  std::vector<float> out(B * T * C), probs(static_cast<size_t>(B) * NH * T * T);
  cpu::attention_forward(out.data(), probs.data(), qkv.data(), B, T, C, NH);
  auto dqkv = dqkv0;
  std::vector<float> cpu_scratch(cpu::attention_backward_scratch_floats(B, T, NH));
  cpu::attention_backward(dqkv.data(), cpu_scratch.data(), dout.data(), qkv.data(),
                          probs.data(), B, T, C, NH);

  auto d_qkv = to_device_bf16(qkv), d_dout = to_device_bf16(dout), d_dqkv = to_device_bf16(dqkv0);
  DeviceBuffer d_out = prefilled(B * T * C * sizeof(bf16), fill),
               d_lse = prefilled(B * NH * T * sizeof(float), fill),
               d_scratch = prefilled(attention_backward_scratch_floats(B, T, NH) * sizeof(float), fill);
  attention_forward(d_out.as<bf16>(), d_lse.as<float>(), d_qkv.as<bf16>(), B, T, C, NH,
                    stream());
  attention_backward(d_dqkv.as<bf16>(), d_scratch.as<float>(), d_dout.as<bf16>(),
                     d_qkv.as<bf16>(), d_out.as<bf16>(), d_lse.as<float>(), B, T, C, NH,
                     stream());
  sync();
  // Outputs are convex combinations of v in [-1, 1], rounded to bf16: 1e-2.
  EXPECT_TRUE(all_close("out", from_device_bf16(d_out, B * T * C), out, 1e-2, 1e-2));
  // lse: fp32 online softmax vs double; scores of size <= sqrt(HS): 1e-4 relative.
  EXPECT_TRUE(all_close("lse", from_device<float>(d_lse, B * NH * T), naive_lse(qkv, B, T, NH, C), 1e-4,
                        1e-4));
  // Gradients pass through bf16 out (for D = rowsum(dout * out)), bf16 P and dS operands of
  // the tensor-core products and bf16 dqkv: errors of ~2^-9 relative on terms of size ~1,
  // random in sign, summed over up to T keys; 3e-2 absolute.
  EXPECT_TRUE(all_close("dqkv", from_device_bf16(d_dqkv, B * T * 3 * C), dqkv, 3e-2, 2e-2));

  // overwrite: the prefilled values are ignored, every element written (the CPU from zeros;
  // the buffer starts as NaN or garbage, so a missed element shows).
  std::vector<float> fresh(dqkv.size(), 0.0f);
  cpu::attention_backward(fresh.data(), cpu_scratch.data(), dout.data(), qkv.data(),
                          probs.data(), B, T, C, NH);
  auto d_fresh = prefilled(dqkv.size() * sizeof(bf16), fill);
  attention_backward(d_fresh.as<bf16>(), d_scratch.as<float>(), d_dout.as<bf16>(),
                     d_qkv.as<bf16>(), d_out.as<bf16>(), d_lse.as<float>(), B, T, C, NH,
                     stream(), /*overwrite=*/true);
  sync();
  const auto overwritten = from_device_bf16(d_fresh, B * T * 3 * C);
  EXPECT_TRUE(all_close("dqkv overwritten", overwritten, fresh, 3e-2, 2e-2));
  // The same gradients by relative norm per part and half (attention_grad_metric.h): bf16
  // operands round each term by up to 2^-9 (2e-3) with random signs, so a part's error norm is
  // a few 1e-3 of its norm.
  std::string worst_part;
  EXPECT_LE(worst_part_relative_norm(overwritten, fresh, B, T, 3 * C,
                                     qkv_parts(T, C, C, /*by_half=*/true), &worst_part),
            1e-2) << worst_part;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttention,
    ::testing::Combine(::testing::Values(Shape{64, 2, 70, 3}, Shape{128, 2, 70, 3},
                                         Shape{64, 3, 1, 2}, Shape{128, 1, 1, 2},
                                         Shape{128, 1, 64, 1}, Shape{128, 2, 129, 2},
                                         Shape{64, 1, 1024, 2}),
                       ::testing::Values(Prefill::kNaN, Prefill::kGarbage, Prefill::kUnwritten)),
    [](const ::testing::TestParamInfo<std::tuple<Shape, Prefill>>& info) {
      const Shape& s = std::get<0>(info.param);
      return "HS" + std::to_string(s.HS) + "_B" + std::to_string(s.B) + "_T" +
             std::to_string(s.T) + "_NH" + std::to_string(s.NH) + "_" +
             testing::to_string(std::get<1>(info.param));
    });

class CudaAttentionRuns : public CudaTest {};

TEST_F(CudaAttentionRuns, ForwardAndBackwardAreBitIdenticalAcrossRuns) {
  // T = 1000: full tiles and a partial last one.
  constexpr int B = 2, T = 1000, NH = 3, C = NH * 64;
  auto d_qkv = to_device_bf16(random_vector(B * T * 3 * C, 4));
  auto d_dout = to_device_bf16(random_vector(B * T * C, 5));
  DeviceBuffer d_out(B * T * C * sizeof(bf16)), d_lse(B * NH * T * sizeof(float)),
      d_scratch(attention_backward_scratch_floats(B, T, NH) * sizeof(float)),
      d_dqkv(B * T * 3 * C * sizeof(bf16));
  std::vector<std::vector<float>> outs, lses, grads;
  for (int r = 0; r < 2; ++r) {
    attention_forward(d_out.as<bf16>(), d_lse.as<float>(), d_qkv.as<bf16>(), B, T, C, NH,
                      stream());
    CUDA_CHECK(cudaMemsetAsync(d_dqkv.get(), 0, d_dqkv.bytes(), stream()));
    attention_backward(d_dqkv.as<bf16>(), d_scratch.as<float>(), d_dout.as<bf16>(),
                       d_qkv.as<bf16>(), d_out.as<bf16>(), d_lse.as<float>(), B, T, C, NH,
                       stream());
    sync();
    outs.push_back(from_device_bf16(d_out, B * T * C));
    lses.push_back(from_device<float>(d_lse, B * NH * T));
    grads.push_back(from_device_bf16(d_dqkv, B * T * 3 * C));
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(lses[0], lses[1]);
  EXPECT_EQ(grads[0], grads[1]);
  // Guard against a vacuous pass: the gradient is not all zeros.
  EXPECT_TRUE(std::any_of(grads[0].begin(), grads[0].end(), [](float g) { return g != 0.0f; }));
}

}  // namespace
}  // namespace strata::kernels::cuda
