// The Llama layer's fused operators on the GPU against their CPU twins at Llama 3.2 1B's
// widths (hidden 2048, FFN 8192): RMSNorm with the residual add fused in, and SwiGLU forward
// and backward. Every output the kernels overwrite starts as NaN, so an element a kernel
// leaves unwritten (a row past a block's last, a column past a stride) fails. Bounds derived
// from the arithmetic, not fitted: a bf16 output is the GPU's fp32 value rounded to nearest
// (relative error <= 2^-9), and that fp32 value differs from the CPU twin's by its own fp32
// error (delta below), so |gpu - cpu| <= (2^-9 + delta) |cpu| (+ delta' for sums that cancel).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/swiglu.h"
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

constexpr double kBf16Rounding = 1.0 / 512;  // 2^-9: round to nearest with an 8-bit mantissa

std::vector<float> nans(std::size_t n) { return std::vector<float>(n, std::nanf("")); }

class CudaLlamaOps : public CudaTest {};

// Rows: 9 spans two of the forward's 8-row blocks, the second with one row; C = 2048 is
// Llama 3.2 1B's hidden size (64 strides of a warp).
TEST_F(CudaLlamaOps, FusedResidualRmsNormWritesEveryOutputAsTheCpuTwin) {
  const int rows = 9, C = 2048;
  const float eps = 1e-5f;  // Llama 3's
  const std::size_t n = static_cast<std::size_t>(rows) * C;
  const auto a = rounded_bf16(random_vector(static_cast<std::int64_t>(n), 31, -2.0f, 2.0f));
  const auto b = rounded_bf16(random_vector(static_cast<std::int64_t>(n), 32, -2.0f, 2.0f));
  const auto w = rounded_bf16(random_vector(C, 33, 0.5f, 1.5f));
  // The residual stream is bf16(a + b): the fp32 sum of two bf16 values (exact up to one
  // rounding), rounded to nearest even: the same bits on both sides.
  std::vector<float> residual(n);
  for (std::size_t i = 0; i < n; ++i) residual[i] = round_bf16(a[i] + b[i]);
  std::vector<float> out(n), rstd(rows);
  cpu::rmsnorm_forward(out.data(), rstd.data(), residual.data(), w.data(), rows, C, eps);

  auto d_a = to_device_bf16(a), d_b = to_device_bf16(b), d_w = to_device_bf16(w);
  auto d_res = to_device_bf16(nans(n)), d_out = to_device_bf16(nans(n)),
       d_rstd = to_device(nans(rows));
  fused_residual_rmsnorm_forward(d_res.as<bf16>(), d_out.as<bf16>(), d_rstd.as<float>(),
                                 d_a.as<bf16>(), d_b.as<bf16>(), d_w.as<bf16>(), rows, C, eps,
                                 stream());
  sync();
  EXPECT_EQ(from_device_bf16(d_res, n), residual);
  // rstd: a 2048-term fp32 sum of squares (relative error <= 2048 * 2^-24 = 1.2e-4 at
  // worst) against the CPU's double, halved by the square root, plus rsqrtf's 2 ulp: 1e-4.
  EXPECT_TRUE(all_close("rstd", from_device<float>(d_rstd, rows), rstd, 0.0, 1e-4));
  // out = x * rstd * w: delta = 1e-4 (rstd) + 2 roundings; then the bf16 rounding.
  EXPECT_TRUE(all_close("out", from_device_bf16(d_out, n), out, 1e-30, kBf16Rounding + 2e-4));
}

// SwiGLU at the FFN width of Llama 3.2 1B (F = 8192) over 3 rows: 24,576 outputs, more than
// one grid-stride sweep of nothing in particular, each row's gate and up halves 8192 apart.
TEST_F(CudaLlamaOps, SwiGluForwardAndBackwardWriteEveryOutputAsTheCpuTwin) {
  const std::int64_t rows = 3, F = 8192;
  const std::size_t n_in = static_cast<std::size_t>(rows * 2 * F);
  const std::size_t n_out = static_cast<std::size_t>(rows * F);
  const auto inp = rounded_bf16(random_vector(static_cast<std::int64_t>(n_in), 41, -6.0f, 6.0f));
  const auto dout = rounded_bf16(random_vector(static_cast<std::int64_t>(n_out), 42));
  const auto dinp0 = rounded_bf16(random_vector(static_cast<std::int64_t>(n_in), 43, -0.1f, 0.1f));
  std::vector<float> out(n_out);
  cpu::swiglu_forward(out.data(), inp.data(), rows, F);
  auto dinp = dinp0;  // accumulated onto
  cpu::swiglu_backward(dinp.data(), inp.data(), dout.data(), rows, F);
  std::vector<float> fresh(n_in, 0.0f);  // overwritten: the gradient alone
  cpu::swiglu_backward(fresh.data(), inp.data(), dout.data(), rows, F);

  auto d_inp = to_device_bf16(inp), d_dout = to_device_bf16(dout);
  auto d_out = to_device_bf16(nans(n_out)), d_dinp = to_device_bf16(dinp0),
       d_fresh = to_device_bf16(nans(n_in));
  swiglu_forward(d_out.as<bf16>(), d_inp.as<bf16>(), rows, F, stream());
  swiglu_backward(d_dinp.as<bf16>(), d_inp.as<bf16>(), d_dout.as<bf16>(), rows, F, stream());
  swiglu_backward(d_fresh.as<bf16>(), d_inp.as<bf16>(), d_dout.as<bf16>(), rows, F, stream(),
                  /*accumulate=*/false);
  sync();
  // Forward: the same fp32 formula, expf against std::exp (2 ulp) and a few roundings:
  // delta = 1e-6 relative.
  EXPECT_TRUE(all_close("out", from_device_bf16(d_out, n_out), out, 1e-30,
                        kBf16Rounding + 1e-6));
  // Backward: silu'(a) = sig (1 + a (1 - sig)) cancels near a = -1.28, where its fp32 error
  // is absolute: ~1e-7 times |a (1 - sig)| <= 1.1, times |dy up| <= 6: atol 1e-5 covers it
  // with room; elsewhere delta = 1e-6 relative, then the bf16 rounding of the sum.
  EXPECT_TRUE(all_close("dinp accumulated", from_device_bf16(d_dinp, n_in), dinp, 1e-5,
                        kBf16Rounding + 1e-6));
  // Overwritten from NaN: a kernel that added to the old value would give NaN here.
  EXPECT_TRUE(all_close("dinp overwritten", from_device_bf16(d_fresh, n_in), fresh, 1e-5,
                        kBf16Rounding + 1e-6));
}

}  // namespace
}  // namespace strata::kernels::cuda
