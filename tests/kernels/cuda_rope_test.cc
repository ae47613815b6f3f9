// Rotary embedding on the GPU against kernels/cpu/rope.h on bf16-rounded rows laid out as a
// grouped-query qkv ([q (NH) | k (KVH) | v (KVH)] heads, q and k rotated, v untouched), at a
// large position offset; forward and backward; unscaled and with Llama 3.1's rope_scaling
// (the device calling kernels/rope_frequency.h as the CPU does).
#include "kernels/cuda/rope.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/rope.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/grad_check.h"

namespace strata::kernels::cuda {
namespace {

using strata::kernels::testing::all_close;
using strata::kernels::testing::random_vector;
using testing::CudaTest;
using testing::from_device_bf16;
using testing::rounded_bf16;
using testing::to_device_bf16;

class CudaRope : public CudaTest {};

TEST_F(CudaRope, ForwardAndBackwardMatchCpuAndLeaveValuesAlone) {
  // Llama 3 8B's head shape: HS 128, theta 500000; 4 query heads over 1 KV head.
  constexpr int B = 2, T = 37, NH = 4, KVH = 1, HS = 128, offset = 8000;
  constexpr std::int64_t stride = (NH + 2 * KVH) * HS;
  // Llama 3.1's published scaling: at position 8000 pairs of all three bands turn.
  const RopeFrequencies unscaled{500000.0}, scaled{500000.0, 8.0, 1.0, 4.0, 8192.0};
  const auto x = rounded_bf16(random_vector(B * T * stride, 31));
  for (int run = 0; run < 4; ++run) {
    const bool forward = run < 2;
    const RopeFrequencies& freq = run % 2 == 0 ? unscaled : scaled;
    SCOPED_TRACE(forward ? "forward" : "backward");
    SCOPED_TRACE(freq.factor == 1.0 ? "unscaled" : "scaled");
    auto want = x;
    auto d_x = to_device_bf16(x);
    if (forward) {
      cpu::rope_forward(want.data(), B, T, NH + KVH, HS, stride, offset, freq);
      rope_forward(d_x.as<bf16>(), B, T, NH + KVH, HS, stride, offset, freq, stream());
    } else {
      cpu::rope_backward(want.data(), B, T, NH + KVH, HS, stride, offset, freq);
      rope_backward(d_x.as<bf16>(), B, T, NH + KVH, HS, stride, offset, freq, stream());
    }
    sync();
    const auto got = from_device_bf16(d_x, x.size());
    // The same double angles and fp32 rotation on the same inputs (|x| <= 1, outputs <= 1.42),
    // then the bf16 rounding of each output: 2^-9 relative, < 3e-3 absolute; atol 4e-3.
    EXPECT_TRUE(all_close("rotated", got, want, 4e-3, 0.0));
    // The v heads are not touched: bit-identical to the input.
    for (int r = 0; r < B * T; ++r) {
      for (std::int64_t c = (NH + KVH) * HS; c < stride; ++c) {
        ASSERT_EQ(got[r * stride + c], x[r * stride + c]) << "row " << r << " col " << c;
      }
    }
  }
}

}  // namespace
}  // namespace strata::kernels::cuda
