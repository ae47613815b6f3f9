// cuBLASLt matmul_forward / matmul_backward against the CPU twins (kernels/cpu/gemm.h) on
// random inputs rounded to bf16 first, so both sides multiply the same numbers; the only
// differences left are accumulation order in fp32 and the rounding of bf16 outputs.
#include "kernels/cuda/gemm.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/grad_check.h"

namespace strata::kernels::cuda {
namespace {

using strata::kernels::testing::all_close;
using strata::kernels::testing::random_vector;
using testing::CudaTest;
using testing::from_device;
using testing::from_device_bf16;
using testing::rounded_bf16;
using testing::to_device;
using testing::to_device_bf16;

// Odd BT and C (no tile-multiple luck); OC a multiple of 8 as pre_gelu requires.
constexpr int BT = 67, C = 96, OC = 40;

// bf16 tolerances: an output of magnitude |y| is rounded with relative error <= 2^-9
// (half an ulp of an 8-bit mantissa) ~ 2e-3; rtol 1e-2 leaves room for fp32 accumulation
// order and for cuBLASLt's own GeLU evaluation, atol 1e-2 for outputs near zero (|y| ~ 1).
constexpr double kAtol = 1e-2, kRtol = 1e-2;

class CudaGemm : public CudaTest {};

TEST_F(CudaGemm, ForwardMatchesCpuWithoutBiasWithBiasAndWithGelu) {
  const auto inp = rounded_bf16(random_vector(BT * C, 1));
  const auto w = rounded_bf16(random_vector(OC * C, 2));
  const auto bias = rounded_bf16(random_vector(OC, 3));
  auto d_inp = to_device_bf16(inp), d_w = to_device_bf16(w), d_bias = to_device_bf16(bias);
  DeviceBuffer d_out(BT * OC * sizeof(bf16)), d_pre(BT * OC * sizeof(bf16));

  std::vector<float> ref(BT * OC), ref_gelu(BT * OC);
  cpu::matmul_forward(ref.data(), inp.data(), w.data(), nullptr, BT, C, OC);
  matmul_forward(d_out.as<bf16>(), d_inp.as<bf16>(), d_w.as<bf16>(), nullptr, BT, C, OC, lt(),
                 stream());
  sync();
  EXPECT_TRUE(all_close("out (no bias)", from_device_bf16(d_out, BT * OC), ref, kAtol, kRtol));

  cpu::matmul_forward(ref.data(), inp.data(), w.data(), bias.data(), BT, C, OC);
  matmul_forward(d_out.as<bf16>(), d_inp.as<bf16>(), d_w.as<bf16>(), d_bias.as<bf16>(), BT, C,
                 OC, lt(), stream());
  sync();
  EXPECT_TRUE(all_close("out (bias)", from_device_bf16(d_out, BT * OC), ref, kAtol, kRtol));

  cpu::gelu_forward(ref_gelu.data(), ref.data(), BT * OC);
  matmul_forward(d_out.as<bf16>(), d_inp.as<bf16>(), d_w.as<bf16>(), d_bias.as<bf16>(), BT, C,
                 OC, lt(), stream(), GemmActivation::kGelu, d_pre.as<bf16>());
  sync();
  EXPECT_TRUE(all_close("out (bias+gelu)", from_device_bf16(d_out, BT * OC), ref_gelu, kAtol,
                        kRtol));
  EXPECT_TRUE(all_close("pre_gelu aux", from_device_bf16(d_pre, BT * OC), ref, kAtol, kRtol));
}

// The residual rides in the matmul (C operand): the same as the CPU matmul plus residual,
// into a separate output and in place over the residual.
TEST_F(CudaGemm, ForwardWithResidualAddsItOnce) {
  const auto inp = rounded_bf16(random_vector(BT * C, 31));
  const auto w = rounded_bf16(random_vector(OC * C, 32));
  const auto bias = rounded_bf16(random_vector(OC, 33));
  const auto residual = rounded_bf16(random_vector(BT * OC, 34, -4.0f, 4.0f));
  std::vector<float> ref(BT * OC);
  cpu::matmul_forward(ref.data(), inp.data(), w.data(), bias.data(), BT, C, OC);
  for (int i = 0; i < BT * OC; ++i) ref[i] += residual[i];
  auto d_inp = to_device_bf16(inp), d_w = to_device_bf16(w), d_bias = to_device_bf16(bias),
       d_res = to_device_bf16(residual);
  DeviceBuffer d_out(BT * OC * sizeof(bf16));
  matmul_forward_residual(d_out.as<bf16>(), d_inp.as<bf16>(), d_w.as<bf16>(), d_bias.as<bf16>(),
                          d_res.as<bf16>(), BT, C, OC, lt(), stream());
  sync();
  EXPECT_TRUE(all_close("out (separate)", from_device_bf16(d_out, BT * OC), ref, kAtol, kRtol));
  matmul_forward_residual(d_res.as<bf16>(), d_inp.as<bf16>(), d_w.as<bf16>(), d_bias.as<bf16>(),
                          d_res.as<bf16>(), BT, C, OC, lt(), stream());
  sync();
  EXPECT_TRUE(all_close("out (in place)", from_device_bf16(d_res, BT * OC), ref, kAtol, kRtol));
}

TEST_F(CudaGemm, Fp32OutputMatchesCpu) {
  const auto inp = rounded_bf16(random_vector(BT * C, 4));
  const auto w = rounded_bf16(random_vector(OC * C, 5));
  const auto bias = random_vector(OC, 6);  // fp32 bias with fp32 output
  auto d_inp = to_device_bf16(inp), d_w = to_device_bf16(w), d_bias = to_device(bias);
  DeviceBuffer d_out(BT * OC * sizeof(float));
  std::vector<float> ref(BT * OC);
  cpu::matmul_forward(ref.data(), inp.data(), w.data(), bias.data(), BT, C, OC);
  matmul_forward(d_out.as<float>(), d_inp.as<bf16>(), d_w.as<bf16>(), d_bias.as<float>(), BT, C,
                 OC, lt(), stream());
  sync();
  // Same products (bf16 x bf16 is exact in fp32), fp32 sums of 96 terms < 1 in size in a
  // different order: differences ~ 96 * 6e-8; 1e-4 is ample.
  EXPECT_TRUE(all_close("out fp32", from_device<float>(d_out, BT * OC), ref, 1e-4, 1e-4));
}

TEST_F(CudaGemm, BackwardAccumulatesLikeCpu) {
  const auto inp = rounded_bf16(random_vector(BT * C, 7));
  const auto w = rounded_bf16(random_vector(OC * C, 8));
  const auto dout = rounded_bf16(random_vector(BT * OC, 9));
  // Prefilled gradients: backward must add on top of them.
  auto dinp = rounded_bf16(random_vector(BT * C, 10, -0.1f, 0.1f));
  auto dw = random_vector(OC * C, 11, -0.1f, 0.1f);
  auto db = random_vector(OC, 12, -0.1f, 0.1f);
  auto d_inp = to_device_bf16(inp), d_w = to_device_bf16(w), d_dout = to_device_bf16(dout);
  auto d_dinp = to_device_bf16(dinp), d_dw = to_device(dw), d_db = to_device(db);

  matmul_backward(d_dinp.as<bf16>(), d_dw.as<float>(), d_db.as<float>(), d_dout.as<bf16>(),
                  d_inp.as<bf16>(), d_w.as<bf16>(), BT, C, OC, lt(), stream());
  sync();
  cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), BT,
                       C, OC);
  // dinp: bf16 result (40-term sums of magnitude ~ 2): bf16 tolerances.
  EXPECT_TRUE(all_close("dinp", from_device_bf16(d_dinp, BT * C), dinp, kAtol, kRtol));
  // dweight and dbias stay fp32: 67-term sums, only the order differs: 1e-4.
  EXPECT_TRUE(all_close("dweight", from_device<float>(d_dw, OC * C), dw, 1e-4, 1e-4));
  EXPECT_TRUE(all_close("dbias", from_device<float>(d_db, OC), db, 1e-4, 1e-4));

  // overwrite_dinp: the prefilled values are ignored (the CPU twin from zeros).
  matmul_backward(d_dinp.as<bf16>(), nullptr, nullptr, d_dout.as<bf16>(), d_inp.as<bf16>(),
                  d_w.as<bf16>(), BT, C, OC, lt(), stream(), /*overwrite_dinp=*/true);
  sync();
  std::vector<float> fresh(dinp.size(), 0.0f);
  cpu::matmul_backward(fresh.data(), nullptr, nullptr, dout.data(), inp.data(), w.data(), BT, C,
                       OC);
  EXPECT_TRUE(all_close("dinp overwritten", from_device_bf16(d_dinp, BT * C), fresh, kAtol, kRtol));
}

// Both bias-gradient kernels against a double-precision column sum: 16-byte aligned rows
// (OC % 8 == 0: the two-stage kernel, with OC not a multiple of its 256-column groups and
// more rows than its splits) and odd OC (the one-block-per-32-columns kernel).
TEST_F(CudaGemm, BiasGradientMatchesColumnSumsOnBothPaths) {
  for (const int cols : {776, 75}) {
    SCOPED_TRACE(::testing::Message() << "OC " << cols);
    const int rows = 3001;
    const auto dout = rounded_bf16(random_vector(rows * cols, 21));
    std::vector<double> want(cols, 0.0);
    auto got0 = random_vector(cols, 22, -0.1f, 0.1f);  // prefilled: the kernel adds
    for (int c = 0; c < cols; ++c) want[c] = got0[c];
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) want[c] += dout[r * cols + c];
    auto d_dout = to_device_bf16(dout), d_db = to_device(got0);
    matmul_backward(nullptr, nullptr, d_db.as<float>(), d_dout.as<bf16>(), nullptr, nullptr, rows,
                    8, cols, lt(), stream());
    sync();
    // 3001 terms in [-1, 1) summed in fp32 in some fixed order: |error| <~ 3001 * 2^-24 * 30.
    EXPECT_TRUE(all_close("dbias", from_device<float>(d_db, cols), want, 1e-3, 1e-5));
  }
}

TEST_F(CudaGemm, BiasGradientIsBitIdenticalAcrossRuns) {
  const int rows = 1000, cols = 72;  // rows > the row strides and splits of either kernel
  auto d_dout = to_device_bf16(random_vector(rows * cols, 13));
  DeviceBuffer a(cols * sizeof(float)), b(cols * sizeof(float));
  CUDA_CHECK(cudaMemsetAsync(a.get(), 0, a.bytes(), stream()));
  CUDA_CHECK(cudaMemsetAsync(b.get(), 0, b.bytes(), stream()));
  matmul_backward(nullptr, nullptr, a.as<float>(), d_dout.as<bf16>(), nullptr, nullptr, rows, 8,
                  cols, lt(), stream());
  matmul_backward(nullptr, nullptr, b.as<float>(), d_dout.as<bf16>(), nullptr, nullptr, rows, 8,
                  cols, lt(), stream());
  sync();
  EXPECT_EQ(from_device<float>(a, cols), from_device<float>(b, cols));
}

}  // namespace
}  // namespace strata::kernels::cuda

namespace strata::kernels::cuda {
namespace {

using testing::from_device_bf16;
using testing::rounded_bf16;
using testing::to_device_bf16;

// The fused GeLU backward: dinp = gelu'(pre) * (dout @ weight), against the CPU pair
// (matmul_backward into zeros, then gelu_backward), C = 96 the GeLU's width.
TEST_F(CudaGemm, DgeluBackwardMatchesTheCpuPair) {
  const auto w = rounded_bf16(random_vector(OC * C, 31));
  const auto dout = rounded_bf16(random_vector(BT * OC, 32));
  const auto pre = rounded_bf16(random_vector(BT * C, 33, -3.0f, 3.0f));
  std::vector<float> product(BT * C, 0.0f), expected(BT * C, 0.0f);
  cpu::matmul_backward(product.data(), nullptr, nullptr, dout.data(), nullptr, w.data(), BT, C, OC);
  cpu::gelu_backward(expected.data(), pre.data(), product.data(), BT * C);
  auto d_w = to_device_bf16(w), d_dout = to_device_bf16(dout), d_pre = to_device_bf16(pre);
  auto d_dinp = to_device_bf16(std::vector<float>(BT * C, 7.0f));  // overwritten
  matmul_backward_dgelu(d_dinp.as<bf16>(), nullptr, nullptr, d_dout.as<bf16>(), nullptr,
                        d_w.as<bf16>(), d_pre.as<bf16>(), BT, C, OC, lt(), stream());
  sync();
  // One bf16 rounding of a 40-term product times gelu' (vs two on the CPU path): bf16 tolerances.
  EXPECT_TRUE(all_close("dinp", from_device_bf16(d_dinp, BT * C), expected, kAtol, kRtol));
}

}  // namespace
}  // namespace strata::kernels::cuda
