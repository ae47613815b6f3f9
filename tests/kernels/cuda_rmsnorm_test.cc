// RMSNorm (plain and with the fused residual add) forward/backward on the GPU against
// kernels/cpu/rmsnorm.h, on bf16-rounded random inputs.
#include "kernels/cuda/rmsnorm.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/rmsnorm.h"
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

// kRmsRows spans several forward blocks (8 rows each); kRmsCols is not a multiple of 32 or 256.
constexpr int kRmsRows = 37, kRmsCols = 200;
constexpr float kEps = 1e-5f;  // Llama 3's

class CudaRmsNorm : public CudaTest {};

TEST_F(CudaRmsNorm, FusedResidualForwardMatchesCpu) {
  const auto a = rounded_bf16(random_vector(kRmsRows * kRmsCols, 1, -2.0f, 2.0f));
  const auto b = rounded_bf16(random_vector(kRmsRows * kRmsCols, 2, -2.0f, 2.0f));
  const auto w = rounded_bf16(random_vector(kRmsCols, 3, 0.5f, 1.5f));
  // The residual is bf16(a + b): the fp32 sum of two bf16 values, rounded to nearest even.
  std::vector<float> residual(kRmsRows * kRmsCols);
  for (int i = 0; i < kRmsRows * kRmsCols; ++i) residual[i] = round_bf16(a[i] + b[i]);
  std::vector<float> out(kRmsRows * kRmsCols), rstd(kRmsRows);
  cpu::rmsnorm_forward(out.data(), rstd.data(), residual.data(), w.data(), kRmsRows, kRmsCols, kEps);

  auto d_a = to_device_bf16(a), d_b = to_device_bf16(b), d_w = to_device_bf16(w);
  DeviceBuffer d_res(kRmsRows * kRmsCols * sizeof(bf16)), d_out(kRmsRows * kRmsCols * sizeof(bf16)),
      d_rstd(kRmsRows * sizeof(float));
  fused_residual_rmsnorm_forward(d_res.as<bf16>(), d_out.as<bf16>(), d_rstd.as<float>(),
                                 d_a.as<bf16>(), d_b.as<bf16>(), d_w.as<bf16>(), kRmsRows, kRmsCols, kEps,
                                 stream());
  sync();
  // Same rounding of the same fp32 sums: bit-identical.
  EXPECT_EQ(from_device_bf16(d_res, kRmsRows * kRmsCols), residual);
  // rstd: an fp32 sum of 200 squares ~ 1 (relative error <= 200 * 6e-8 ~ 1e-5) vs the CPU's
  // double, then rsqrtf (2 ulp): 1e-4 relative, halved by the square root.
  EXPECT_TRUE(all_close("rstd", from_device<float>(d_rstd, kRmsRows), rstd, 1e-5, 1e-4));
  // Outputs ~ N(0, 1) * w rounded to bf16 (relative 2^-9 = 2e-3): atol/rtol 1e-2.
  EXPECT_TRUE(all_close("out", from_device_bf16(d_out, kRmsRows * kRmsCols), out, 1e-2, 1e-2));

  // In place (residual aliasing inp1) gives the same residual.
  fused_residual_rmsnorm_forward(d_a.as<bf16>(), d_out.as<bf16>(), d_rstd.as<float>(),
                                 d_a.as<bf16>(), d_b.as<bf16>(), d_w.as<bf16>(), kRmsRows, kRmsCols, kEps,
                                 stream());
  sync();
  EXPECT_EQ(from_device_bf16(d_a, kRmsRows * kRmsCols), residual);
}

TEST_F(CudaRmsNorm, PlainForwardMatchesCpuWithALargeEps) {
  // eps = 0.5 is comparable to mean(x^2) ~ 3: an eps dropped or misplaced shows.
  const auto x = rounded_bf16(random_vector(kRmsRows * kRmsCols, 5, -3.0f, 3.0f));
  const auto w = rounded_bf16(random_vector(kRmsCols, 6, 0.5f, 1.5f));
  std::vector<float> out(kRmsRows * kRmsCols), rstd(kRmsRows);
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), kRmsRows, kRmsCols, 0.5f);
  auto d_x = to_device_bf16(x), d_w = to_device_bf16(w);
  DeviceBuffer d_out(kRmsRows * kRmsCols * sizeof(bf16)), d_rstd(kRmsRows * sizeof(float));
  rmsnorm_forward(d_out.as<bf16>(), d_rstd.as<float>(), d_x.as<bf16>(), d_w.as<bf16>(), kRmsRows, kRmsCols,
                  0.5f, stream());
  sync();
  EXPECT_TRUE(all_close("rstd", from_device<float>(d_rstd, kRmsRows), rstd, 1e-5, 1e-4));
  EXPECT_TRUE(all_close("out", from_device_bf16(d_out, kRmsRows * kRmsCols), out, 1e-2, 1e-2));
}

TEST_F(CudaRmsNorm, BackwardAccumulatesLikeCpuAndIsDeterministic) {
  // More rows than the 1024 partial blocks (some blocks own two rows), and a kRmsCols past one
  // 256-thread stride.
  const struct { int rows, cols; } cases[] = {{300, 200}, {2100, 520}};
  for (const auto& shape : cases) {
    const int rows = shape.rows, cols = shape.cols;
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
    const auto x = rounded_bf16(random_vector(rows * cols, 8, -3.0f, 3.0f));
    const auto w = rounded_bf16(random_vector(cols, 9, 0.5f, 1.5f));
    const auto dout = rounded_bf16(random_vector(rows * cols, 11));
    std::vector<float> out(rows * cols), rstd(rows);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), rows, cols, kEps);
    auto dinp = rounded_bf16(random_vector(rows * cols, 12, -0.1f, 0.1f));  // prefilled
    auto dw = random_vector(cols, 13, -0.1f, 0.1f);

    auto d_x = to_device_bf16(x), d_w = to_device_bf16(w), d_dout = to_device_bf16(dout);
    auto d_rstd = to_device(rstd);  // the CPU's statistic
    auto d_dinp = to_device_bf16(dinp), d_dw = to_device(dw);
    DeviceBuffer scratch(rmsnorm_backward_scratch_floats(rows, cols) * sizeof(float));
    rmsnorm_backward(d_dinp.as<bf16>(), d_dw.as<float>(), d_dout.as<bf16>(), d_x.as<bf16>(),
                     d_w.as<bf16>(), d_rstd.as<float>(), rows, cols, scratch.as<float>(),
                     stream());
    sync();
    cpu::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(),
                          rows, cols);
    // dinp rounded to bf16 (values ~ 1): 1e-2. dweight: sums of up to 2100 terms dy * xhat
    // (~1 each, random signs: totals ~ 50) in fp32 vs the CPU's double: 2100 * 6e-8 * 50
    // ~ 6e-3 worst case, ~1e-4 typical; 1e-2 absolute, 1e-4 relative.
    EXPECT_TRUE(all_close("dinp", from_device_bf16(d_dinp, rows * cols), dinp, 1e-2, 1e-2));
    EXPECT_TRUE(all_close("dweight", from_device<float>(d_dw, cols), dw, 1e-2, 1e-4));

    // Two runs from zeroed gradients give the same bits.
    std::vector<std::vector<float>> runs;
    for (int r = 0; r < 2; ++r) {
      CUDA_CHECK(cudaMemsetAsync(d_dw.get(), 0, d_dw.bytes(), stream()));
      rmsnorm_backward(d_dinp.as<bf16>(), d_dw.as<float>(), d_dout.as<bf16>(), d_x.as<bf16>(),
                       d_w.as<bf16>(), d_rstd.as<float>(), rows, cols, scratch.as<float>(),
                       stream());
      sync();
      runs.push_back(from_device<float>(d_dw, cols));
    }
    EXPECT_EQ(runs[0], runs[1]);
  }
}

}  // namespace
}  // namespace strata::kernels::cuda
