// Embedding forward (token + position rows), vocab-slice zeros and two-slice sum equal to the
// full table, and backward against finite differences including repeated tokens.
#include "kernels/cpu/embedding.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/check.h"
#include "tests/kernels/grad_check.h"

namespace strata::kernels::cpu {
namespace {

using strata::kernels::testing::accumulated_part;
using strata::kernels::testing::gradient_matches;
using strata::kernels::testing::random_vector;
using strata::kernels::testing::weighted_sum;

TEST(Embedding, ForwardAddsTokenAndPositionRows) {
  const int B = 2, T = 3, C = 4, V = 5;
  auto wte = random_vector(V * C, 151);
  auto wpe = random_vector(T * C, 152);
  const std::vector<std::int32_t> tokens = {4, 0, 4, 2, 2, 1};
  std::vector<float> out(B * T * C);
  embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, 0, V);
  for (int i = 0; i < B * T; ++i)
    for (int c = 0; c < C; ++c)  // one fp32 add each side: bitwise equal
      EXPECT_EQ(out[i * C + c], wte[tokens[i] * C + c] + wpe[(i % T) * C + c]) << i << "," << c;
  embedding_forward(out.data(), tokens.data(), wte.data(), nullptr, B, T, C, 0, V);
  for (int i = 0; i < B * T; ++i)
    for (int c = 0; c < C; ++c) EXPECT_EQ(out[i * C + c], wte[tokens[i] * C + c]);
}

TEST(Embedding, VocabSlicesGiveZeroOutsideAndSumToFull) {
  const int B = 1, T = 4, C = 3, V = 6, split = 2;
  auto wte = random_vector(V * C, 161);
  auto wpe = random_vector(T * C, 162);
  const std::vector<std::int32_t> tokens = {1, 2, 5, 0};  // 1, 0 in slice 0; 2, 5 in slice 1
  std::vector<float> full(T * C), s0(T * C), s1(T * C);
  embedding_forward(full.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, 0, V);
  // Slice 0 holds rows [0, 2) and adds positions; slice 1 holds rows [2, 6), no positions.
  embedding_forward(s0.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, 0, split);
  embedding_forward(s1.data(), tokens.data(), wte.data() + split * C, nullptr, B, T, C, split, V);
  for (int c = 0; c < C; ++c) {
    EXPECT_EQ(s1[0 * C + c], 0.0f);  // token 1 is out of slice 1
    EXPECT_EQ(s1[3 * C + c], 0.0f);  // token 0 is out of slice 1
    EXPECT_EQ(s0[1 * C + c], wpe[1 * C + c]);  // token 2 out of slice 0: position row only
  }
  // The all-reduce: x + 0 is exact, so the two slices sum to the full table bitwise.
  for (int i = 0; i < T * C; ++i) EXPECT_EQ(s0[i] + s1[i], full[i]) << i;
}

TEST(Embedding, BackwardMatchesFiniteDifferencesWithRepeatedTokens) {
  const int B = 2, T = 3, C = 2, v0 = 1, v1 = 4;  // slice [1, 4) of a vocab of 4
  const std::vector<std::int32_t> tokens = {3, 3, 0, 1, 3, 2};  // 3 repeated, 0 out of slice
  auto wte = random_vector((v1 - v0) * C, 171);
  auto wpe = random_vector(T * C, 172);
  auto lw = random_vector(B * T * C, 173);
  auto dwte0 = random_vector((v1 - v0) * C, 174, -0.1f, 0.1f);
  auto dwpe0 = random_vector(T * C, 175, -0.1f, 0.1f);
  auto dwte = dwte0, dwpe = dwpe0;
  embedding_backward(dwte.data(), dwpe.data(), lw.data(), tokens.data(), B, T, C, v0, v1);
  std::vector<float> out(B * T * C);
  auto loss = [&] {
    embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, v0, v1);
    return weighted_sum(out, lw);
  };
  // Linear in the tables: central differences exact up to fp32 rounding (~1e-7 / 2e-2).
  EXPECT_TRUE(gradient_matches("dwte", wte, accumulated_part(dwte, dwte0), loss, 1e-2, 1e-4,
                               1e-3));
  EXPECT_TRUE(gradient_matches("dwpe", wpe, accumulated_part(dwpe, dwpe0), loss, 1e-2, 1e-4,
                               1e-3));
}

TEST(Embedding, BadArgumentsThrowKernelError) {
  std::vector<float> buf(64, 0.0f);
  const std::vector<std::int32_t> negative = {0, -1};
  EXPECT_THROW(embedding_forward(buf.data(), negative.data(), buf.data(), nullptr, 1, 2, 4, 0, 8),
               KernelError);
  const std::vector<std::int32_t> ok = {0, 1};
  EXPECT_THROW(embedding_forward(buf.data(), ok.data(), buf.data(), nullptr, 1, 2, 4, 5, 5),
               KernelError);  // empty slice
}

}  // namespace
}  // namespace strata::kernels::cpu
