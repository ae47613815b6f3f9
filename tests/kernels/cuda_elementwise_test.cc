// Embedding, GeLU and elementwise kernels on the GPU against the CPU twins
// (kernels/cpu/embedding.h, gelu.h) and against exact host arithmetic where the result is a
// single rounding of an exact fp32 value.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gelu.h"
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

class CudaEmbedding : public CudaTest {};

// A vocab slice [10, 60) of a 100-token vocabulary; tokens repeat and fall outside the slice.
TEST_F(CudaEmbedding, ForwardAndBackwardMatchCpuBitForBit) {
  const int B = 3, T = 40, C = 72, vs = 10, ve = 60, rows = ve - vs;
  std::vector<std::int32_t> tokens(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 37 + i / 7) % 100;
  const auto wte = rounded_bf16(random_vector(rows * C, 1));
  const auto wpe = rounded_bf16(random_vector(T * C, 2));
  const auto dout = rounded_bf16(random_vector(B * T * C, 3));
  auto dwte = random_vector(rows * C, 4, -0.1f, 0.1f);  // prefilled
  auto dwpe = random_vector(T * C, 5, -0.1f, 0.1f);

  std::vector<float> out(B * T * C);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, vs, ve);
  auto d_tokens = to_device(tokens), d_wte = to_device_bf16(wte), d_wpe = to_device_bf16(wpe),
       d_dout = to_device_bf16(dout), d_dwte = to_device(dwte), d_dwpe = to_device(dwpe);
  DeviceBuffer d_out(B * T * C * sizeof(bf16));
  embedding_forward(d_out.as<bf16>(), d_tokens.as<std::int32_t>(), d_wte.as<bf16>(),
                    d_wpe.as<bf16>(), B, T, C, vs, ve, stream());
  embedding_backward(d_dwte.as<float>(), d_dwpe.as<float>(), d_dout.as<bf16>(),
                     d_tokens.as<std::int32_t>(), B, T, C, vs, ve, stream());
  sync();
  cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, vs, ve);
  // Forward: one fp32 add of two bf16 values, then one rounding on both sides.
  EXPECT_EQ(from_device_bf16(d_out, B * T * C), rounded_bf16(out));
  // Backward: the same fp32 additions in the same (position) order as the CPU: exact.
  EXPECT_EQ(from_device<float>(d_dwte, rows * C), dwte);
  EXPECT_EQ(from_device<float>(d_dwpe, T * C), dwpe);
}

class CudaGelu : public CudaTest {};

TEST_F(CudaGelu, ForwardAndBackwardMatchCpu) {
  const std::int64_t N = 5000;
  const auto x = rounded_bf16(random_vector(N, 1, -4.0f, 4.0f));
  const auto dout = rounded_bf16(random_vector(N, 2));
  auto dinp = rounded_bf16(random_vector(N, 3, -0.1f, 0.1f));  // prefilled
  std::vector<float> y(N);
  cpu::gelu_forward(y.data(), x.data(), N);
  auto d_x = to_device_bf16(x), d_dout = to_device_bf16(dout), d_dinp = to_device_bf16(dinp);
  DeviceBuffer d_y(N * sizeof(bf16));
  gelu_forward(d_y.as<bf16>(), d_x.as<bf16>(), N, stream());
  gelu_backward(d_dinp.as<bf16>(), d_x.as<bf16>(), d_dout.as<bf16>(), N, stream());
  sync();
  cpu::gelu_backward(dinp.data(), x.data(), dout.data(), N);
  // fp32 math on both sides (tanhf vs std::tanh differ by an ulp or two), then one bf16
  // rounding (relative 2^-9): rtol 1e-2; atol 1e-3 for results near zero.
  EXPECT_TRUE(all_close("gelu", from_device_bf16(d_y, N), y, 1e-3, 1e-2));
  EXPECT_TRUE(all_close("dinp", from_device_bf16(d_dinp, N), dinp, 1e-3, 1e-2));

  // Overwrite mode, in place over dout: the CPU twin accumulating into zeros.
  gelu_backward(d_dout.as<bf16>(), d_x.as<bf16>(), d_dout.as<bf16>(), N, stream(),
                /*accumulate=*/false);
  sync();
  std::vector<float> fresh(N, 0.0f);
  cpu::gelu_backward(fresh.data(), x.data(), dout.data(), N);
  EXPECT_TRUE(all_close("dinp overwritten", from_device_bf16(d_dout, N), fresh, 1e-3, 1e-2));
}

class CudaElementwise : public CudaTest {};

TEST_F(CudaElementwise, ResidualCastsAndAccumulateAreExactRoundings) {
  const std::int64_t N = 3001;
  const auto a = rounded_bf16(random_vector(N, 1));
  const auto b = rounded_bf16(random_vector(N, 2));
  const auto f = random_vector(N, 3);
  auto d_a = to_device_bf16(a), d_b = to_device_bf16(b), d_f = to_device(f);
  DeviceBuffer d_sum(N * sizeof(bf16)), d_f16(N * sizeof(bf16)), d_back(N * sizeof(float));
  residual_forward(d_sum.as<bf16>(), d_a.as<bf16>(), d_b.as<bf16>(), N, stream());
  cast_to_bf16(d_f16.as<bf16>(), d_f.as<float>(), N, stream());
  cast_to_f32(d_back.as<float>(), d_f16.as<bf16>(), N, stream());
  accumulate(d_f.as<float>(), d_a.as<bf16>(), N, stream());  // f += a
  sync();
  std::vector<float> sum(N), acc(N);
  for (std::int64_t i = 0; i < N; ++i) {
    sum[i] = round_bf16(a[i] + b[i]);
    acc[i] = f[i] + a[i];
  }
  EXPECT_EQ(from_device_bf16(d_sum, N), sum);
  EXPECT_EQ(from_device_bf16(d_f16, N), rounded_bf16(f));
  EXPECT_EQ(from_device<float>(d_back, N), rounded_bf16(f));  // bf16 -> fp32 is exact
  EXPECT_EQ(from_device<float>(d_f, N), acc);
}

}  // namespace
}  // namespace strata::kernels::cuda
