// LayerNorm (plain and with the fused residual add) forward/backward on the GPU against
// kernels/cpu/layernorm.h, on bf16-rounded random inputs.
#include "kernels/cuda/layernorm.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/layernorm.h"
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

// kLnRows spans several forward blocks (8 rows each); kLnCols is not a multiple of 32 or 256.
constexpr int kLnRows = 37, kLnCols = 200;

class CudaLayerNorm : public CudaTest {};

TEST_F(CudaLayerNorm, FusedResidualForwardMatchesCpu) {
  const auto a = rounded_bf16(random_vector(kLnRows * kLnCols, 1, -2.0f, 2.0f));
  const auto b = rounded_bf16(random_vector(kLnRows * kLnCols, 2, -2.0f, 2.0f));
  const auto w = rounded_bf16(random_vector(kLnCols, 3, 0.5f, 1.5f));
  const auto bias = rounded_bf16(random_vector(kLnCols, 4));
  // The residual is bf16(a + b): the fp32 sum of two bf16 values, rounded to nearest even.
  std::vector<float> residual(kLnRows * kLnCols);
  for (int i = 0; i < kLnRows * kLnCols; ++i) residual[i] = round_bf16(a[i] + b[i]);
  std::vector<float> out(kLnRows * kLnCols), mean(kLnRows), rstd(kLnRows);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), residual.data(), w.data(),
                         bias.data(), kLnRows, kLnCols);

  auto d_a = to_device_bf16(a), d_b = to_device_bf16(b), d_w = to_device_bf16(w),
       d_bias = to_device_bf16(bias);
  DeviceBuffer d_res(kLnRows * kLnCols * sizeof(bf16)), d_out(kLnRows * kLnCols * sizeof(bf16)),
      d_mean(kLnRows * sizeof(float)), d_rstd(kLnRows * sizeof(float));
  fused_residual_layernorm_forward(d_res.as<bf16>(), d_out.as<bf16>(), d_mean.as<float>(),
                                   d_rstd.as<float>(), d_a.as<bf16>(), d_b.as<bf16>(),
                                   d_w.as<bf16>(), d_bias.as<bf16>(), kLnRows, kLnCols, stream());
  sync();
  // Same rounding of the same fp32 sums: bit-identical.
  EXPECT_EQ(from_device_bf16(d_res, kLnRows * kLnCols), residual);
  // Statistics: fp32 two-pass vs the CPU's double, rows of 200 values ~ 1: 1e-5.
  EXPECT_TRUE(all_close("mean", from_device<float>(d_mean, kLnRows), mean, 1e-5, 1e-5));
  EXPECT_TRUE(all_close("rstd", from_device<float>(d_rstd, kLnRows), rstd, 1e-5, 1e-4));
  // Outputs ~ N(0, 1) * w + bias rounded to bf16 (relative 2^-9): atol/rtol 1e-2.
  EXPECT_TRUE(all_close("out", from_device_bf16(d_out, kLnRows * kLnCols), out, 1e-2, 1e-2));

  // In place (residual aliasing inp1) gives the same residual.
  fused_residual_layernorm_forward(d_a.as<bf16>(), d_out.as<bf16>(), d_mean.as<float>(),
                                   d_rstd.as<float>(), d_a.as<bf16>(), d_b.as<bf16>(),
                                   d_w.as<bf16>(), d_bias.as<bf16>(), kLnRows, kLnCols, stream());
  sync();
  EXPECT_EQ(from_device_bf16(d_a, kLnRows * kLnCols), residual);
}

TEST_F(CudaLayerNorm, PlainForwardMatchesCpu) {
  const auto x = rounded_bf16(random_vector(kLnRows * kLnCols, 5, -3.0f, 3.0f));
  const auto w = rounded_bf16(random_vector(kLnCols, 6, 0.5f, 1.5f));
  const auto bias = rounded_bf16(random_vector(kLnCols, 7));
  std::vector<float> out(kLnRows * kLnCols), mean(kLnRows), rstd(kLnRows);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(),
                         kLnRows, kLnCols);
  auto d_x = to_device_bf16(x), d_w = to_device_bf16(w), d_bias = to_device_bf16(bias);
  DeviceBuffer d_out(kLnRows * kLnCols * sizeof(bf16)), d_mean(kLnRows * sizeof(float)),
      d_rstd(kLnRows * sizeof(float));
  layernorm_forward(d_out.as<bf16>(), d_mean.as<float>(), d_rstd.as<float>(), d_x.as<bf16>(),
                    d_w.as<bf16>(), d_bias.as<bf16>(), kLnRows, kLnCols, stream());
  sync();
  EXPECT_TRUE(all_close("mean", from_device<float>(d_mean, kLnRows), mean, 1e-5, 1e-5));
  EXPECT_TRUE(all_close("rstd", from_device<float>(d_rstd, kLnRows), rstd, 1e-5, 1e-4));
  EXPECT_TRUE(all_close("out", from_device_bf16(d_out, kLnRows * kLnCols), out, 1e-2, 1e-2));
}

TEST_F(CudaLayerNorm, BackwardAccumulatesLikeCpuAndIsDeterministic) {
  // (rows, cols): the 16-byte path with one and with two column vectors per thread (2056 / 8
  // = 257 > 256 threads), and the scalar path (100 % 8 != 0) with more rows than the 1024
  // partial blocks, so some blocks own two rows.
  const struct { int rows, cols; } cases[] = {{300, 200}, {1500, 2056}, {2100, 100}};
  for (const auto& shape : cases) {
    const int rows = shape.rows, cols = shape.cols;
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
    const auto x = rounded_bf16(random_vector(rows * cols, 8, -3.0f, 3.0f));
    const auto w = rounded_bf16(random_vector(cols, 9, 0.5f, 1.5f));
    const auto bias = rounded_bf16(random_vector(cols, 10));
    const auto dout = rounded_bf16(random_vector(rows * cols, 11));
    std::vector<float> out(rows * cols), mean(rows), rstd(rows);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(),
                           rows, cols);
    auto dinp = rounded_bf16(random_vector(rows * cols, 12, -0.1f, 0.1f));  // prefilled
    auto dw = random_vector(cols, 13, -0.1f, 0.1f);
    auto db = random_vector(cols, 14, -0.1f, 0.1f);

    auto d_x = to_device_bf16(x), d_w = to_device_bf16(w), d_dout = to_device_bf16(dout);
    auto d_mean = to_device(mean), d_rstd = to_device(rstd);  // the CPU's statistics
    auto d_dinp = to_device_bf16(dinp), d_dw = to_device(dw), d_db = to_device(db);
    DeviceBuffer scratch(layernorm_backward_scratch_floats(rows, cols) * sizeof(float));
    layernorm_backward(d_dinp.as<bf16>(), d_dw.as<float>(), d_db.as<float>(), d_dout.as<bf16>(),
                       d_x.as<bf16>(), d_w.as<bf16>(), d_mean.as<float>(), d_rstd.as<float>(),
                       rows, cols, scratch.as<float>(), stream());
    sync();
    cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                            mean.data(), rstd.data(), rows, cols);
    // dinp rounded to bf16 (values ~ 1): 1e-2. dweight/dbias: 300-term fp32 sums vs the CPU's
    // double sums, magnitudes ~ 10: 1e-3 absolute, 1e-4 relative.
    EXPECT_TRUE(all_close("dinp", from_device_bf16(d_dinp, rows * cols), dinp, 1e-2, 1e-2));
    EXPECT_TRUE(all_close("dweight", from_device<float>(d_dw, cols), dw, 1e-3, 1e-4));
    EXPECT_TRUE(all_close("dbias", from_device<float>(d_db, cols), db, 1e-3, 1e-4));

    // A second run from zeroed gradients twice gives the same bits.
    std::vector<std::vector<float>> runs;
    for (int r = 0; r < 2; ++r) {
      CUDA_CHECK(cudaMemsetAsync(d_dw.get(), 0, d_dw.bytes(), stream()));
      CUDA_CHECK(cudaMemsetAsync(d_db.get(), 0, d_db.bytes(), stream()));
      layernorm_backward(d_dinp.as<bf16>(), d_dw.as<float>(), d_db.as<float>(),
                         d_dout.as<bf16>(), d_x.as<bf16>(), d_w.as<bf16>(), d_mean.as<float>(),
                         d_rstd.as<float>(), rows, cols, scratch.as<float>(), stream());
      sync();
      runs.push_back(from_device<float>(d_dw, cols));
    }
    EXPECT_EQ(runs[0], runs[1]);
  }
}

}  // namespace
}  // namespace strata::kernels::cuda
