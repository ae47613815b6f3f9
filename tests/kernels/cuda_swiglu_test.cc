// SwiGLU forward/backward on the GPU against kernels/cpu/swiglu.h on bf16-rounded inputs in
// the [gate | up] row layout: accumulating and overwriting (in place over the input) backward.
#include "kernels/cuda/swiglu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/swiglu.h"
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

// kSwiGluCols odd and kSwiGluRows * kSwiGluCols past one grid-stride sweep of nothing in particular: 70 x 333.
constexpr int kSwiGluRows = 70, kSwiGluCols = 333;

class CudaSwiGlu : public CudaTest {};

TEST_F(CudaSwiGlu, ForwardAndBackwardMatchCpu) {
  const auto inp = rounded_bf16(random_vector(kSwiGluRows * 2 * kSwiGluCols, 21, -4.0f, 4.0f));
  const auto dout = rounded_bf16(random_vector(kSwiGluRows * kSwiGluCols, 22));
  const auto dinp0 = rounded_bf16(random_vector(kSwiGluRows * 2 * kSwiGluCols, 23, -0.1f, 0.1f));
  std::vector<float> out(kSwiGluRows * kSwiGluCols);
  cpu::swiglu_forward(out.data(), inp.data(), kSwiGluRows, kSwiGluCols);
  auto dinp = dinp0;
  cpu::swiglu_backward(dinp.data(), inp.data(), dout.data(), kSwiGluRows, kSwiGluCols);

  auto d_inp = to_device_bf16(inp), d_dout = to_device_bf16(dout),
       d_dinp = to_device_bf16(dinp0);
  DeviceBuffer d_out(kSwiGluRows * kSwiGluCols * sizeof(bf16));
  swiglu_forward(d_out.as<bf16>(), d_inp.as<bf16>(), kSwiGluRows, kSwiGluCols, stream());
  swiglu_backward(d_dinp.as<bf16>(), d_inp.as<bf16>(), d_dout.as<bf16>(), kSwiGluRows, kSwiGluCols, stream());
  sync();
  // Same fp32 formula on the same inputs (expf vs std::exp: ~1 ulp), then the bf16 rounding
  // of the result (2^-9 = 2e-3 relative; |out| <= 16): rtol 1e-2, atol 1e-2 near zero.
  EXPECT_TRUE(all_close("out", from_device_bf16(d_out, kSwiGluRows * kSwiGluCols), out, 1e-2, 1e-2));
  // Gradients ~ up to 4 plus the prefilled 0.1, one bf16 rounding of the sum: the same.
  EXPECT_TRUE(all_close("dinp", from_device_bf16(d_dinp, kSwiGluRows * 2 * kSwiGluCols), dinp, 1e-2, 1e-2));

  // Overwrite, in place over the input: every element replaced by its gradient alone (the
  // CPU from zeros).
  std::vector<float> fresh(inp.size(), 0.0f);
  cpu::swiglu_backward(fresh.data(), inp.data(), dout.data(), kSwiGluRows, kSwiGluCols);
  swiglu_backward(d_inp.as<bf16>(), d_inp.as<bf16>(), d_dout.as<bf16>(), kSwiGluRows, kSwiGluCols, stream(),
                  /*accumulate=*/false);
  sync();
  EXPECT_TRUE(all_close("dinp in place", from_device_bf16(d_inp, kSwiGluRows * 2 * kSwiGluCols), fresh, 1e-2,
                        1e-2));
}

}  // namespace
}  // namespace strata::kernels::cuda
