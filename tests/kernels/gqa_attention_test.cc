// Grouped-query attention in the tiled CPU kernel (flash_attention.h's KVH overloads): against
// a plain double reference in the [q | k | v] layout with KVH key/value heads; against the
// same kernel run as ordinary multi-head attention on K and V copied to every query head
// (forward and dq bit-identical, dk and dv the sums over each group); backward against finite
// differences; KVH == NH is the old overload's bits; argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/cpu/flash_attention.h"
#include "tests/kernels/grad_check.h"

namespace strata::kernels::cpu {
namespace {

using strata::kernels::testing::accumulated_part;
using strata::kernels::testing::all_close;
using strata::kernels::testing::gradient_matches;
using strata::kernels::testing::random_vector;
using strata::kernels::testing::weighted_sum;

struct Gqa {
  int B, T, NH, KVH, HS;
  int C() const { return NH * HS; }
  int width() const { return (NH + 2 * KVH) * HS; }  // a qkv row
  std::size_t qkv_size() const { return std::size_t(B) * T * width(); }
  std::size_t out_size() const { return std::size_t(B) * T * C(); }
  std::size_t q(int b, int t, int h, int i) const {
    return (std::size_t(b) * T + t) * width() + h * HS + i;
  }
  std::size_t k(int b, int t, int g, int i) const { return q(b, t, NH + g, i); }
  std::size_t v(int b, int t, int g, int i) const { return q(b, t, NH + KVH + g, i); }
  std::size_t o(int b, int t, int h, int i) const {
    return (std::size_t(b) * T + t) * C() + h * HS + i;
  }
};

struct GqaReference {
  std::vector<double> out, lse, dqkv;
};

// Causal softmax(q k^T / sqrt(HS)) v per query head h, with k and v of KV head h / (NH / KVH);
// the gradients by the chain rule, dk and dv summed over every query head that reads them.
GqaReference reference(const std::vector<float>& qkv, const std::vector<float>& dout,
                    const Gqa& s) {
  const double scale = 1.0 / std::sqrt(double(s.HS));
  GqaReference r{std::vector<double>(s.out_size()),
              std::vector<double>(std::size_t(s.B) * s.NH * s.T),
              std::vector<double>(s.qkv_size())};
  std::vector<double> p(s.T), dp(s.T);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      const int g = h / (s.NH / s.KVH);
      for (int t = 0; t < s.T; ++t) {
        double mx = -INFINITY;
        for (int u = 0; u <= t; ++u) {
          double dot = 0;
          for (int i = 0; i < s.HS; ++i) dot += double{qkv[s.q(b, t, h, i)]} * qkv[s.k(b, u, g, i)];
          p[u] = dot * scale;
          mx = std::max(mx, p[u]);
        }
        double z = 0;
        for (int u = 0; u <= t; ++u) z += std::exp(p[u] - mx);
        const double lse = mx + std::log(z);
        r.lse[(std::size_t(b) * s.NH + h) * s.T + t] = lse;
        double D = 0;
        for (int u = 0; u <= t; ++u) {
          p[u] = std::exp(p[u] - lse);
          dp[u] = 0;
          for (int i = 0; i < s.HS; ++i) {
            r.out[s.o(b, t, h, i)] += p[u] * qkv[s.v(b, u, g, i)];
            dp[u] += double{dout[s.o(b, t, h, i)]} * qkv[s.v(b, u, g, i)];
          }
          D += p[u] * dp[u];
        }
        for (int u = 0; u <= t; ++u) {
          const double ds = p[u] * (dp[u] - D) * scale;
          for (int i = 0; i < s.HS; ++i) {
            r.dqkv[s.q(b, t, h, i)] += ds * qkv[s.k(b, u, g, i)];
            r.dqkv[s.k(b, u, g, i)] += ds * qkv[s.q(b, t, h, i)];
            r.dqkv[s.v(b, u, g, i)] += p[u] * dout[s.o(b, t, h, i)];
          }
        }
      }
    }
  return r;
}

struct Result {
  std::vector<float> out, lse, dqkv;
};

Result run(const std::vector<float>& qkv, const std::vector<float>& dout, const Gqa& s) {
  Result r{std::vector<float>(s.out_size(), NAN),
           std::vector<float>(std::size_t(s.B) * s.NH * s.T, NAN),
           std::vector<float>(s.qkv_size(), 0.0f)};
  flash_attention_forward(r.out.data(), r.lse.data(), qkv.data(), s.B, s.T, s.C(), s.NH, s.KVH);
  std::vector<float> scratch(flash_attention_backward_scratch_floats(s.B, s.T, s.NH), NAN);
  flash_attention_backward(r.dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                           r.out.data(), r.lse.data(), s.B, s.T, s.C(), s.NH, s.KVH);
  return r;
}

// Groups of 4 (Llama 3 8B's 32 / 8), 2 and 6 (NH 6 over one KV head: multi-query); T across
// the 64-row query and 128-column key blocks; HS 16 and 64.
const Gqa kGqaCases[] = {{2, 70, 4, 1, 16}, {1, 130, 8, 2, 16}, {1, 200, 4, 2, 64},
                      {2, 5, 6, 1, 16}};

class GqaAttention : public ::testing::TestWithParam<Gqa> {};

TEST_P(GqaAttention, MatchesDoubleReference) {
  const Gqa s = GetParam();
  const auto qkv = random_vector(s.qkv_size(), 500 + s.T);
  const auto dout = random_vector(s.out_size(), 600 + s.T);
  const GqaReference ref = reference(qkv, dout, s);
  const Result got = run(qkv, dout, s);
  // flash_attention_test's bound kappa (Higham's gamma_n for the T + HS term sums, the scores'
  // error amplified by their size <= sqrt(HS) = 8 on inputs in [-1, 1], the fp32 exps): at
  // T = 200, HS = 64 it is ~4e-5 relative to the sums of absolute terms. out is a convex
  // combination of v in [-1, 1] (absolute terms <= 1): atol 5e-5. The gradients' absolute
  // terms reach ~HS |dp| ~ 10 per product, summed over a group of up to 6 heads: atol 2e-3,
  // rtol 1e-3. lse <= 8 + log T: 5e-5 * 15 ~ 1e-3.
  EXPECT_TRUE(all_close("out", got.out, ref.out, 5e-5, 0.0));
  EXPECT_TRUE(all_close("lse", got.lse, ref.lse, 1e-3, 0.0));
  EXPECT_TRUE(all_close("dqkv", got.dqkv, ref.dqkv, 2e-3, 1e-3));
}

TEST_P(GqaAttention, EqualsMultiHeadAttentionOnCopiedKeysAndValues) {
  const Gqa s = GetParam();
  const Gqa mha{s.B, s.T, s.NH, s.NH, s.HS};
  const int group = s.NH / s.KVH;
  const auto qkv = random_vector(s.qkv_size(), 700 + s.T);
  const auto dout = random_vector(s.out_size(), 800 + s.T);
  // The same q, and KV head h / group copied into head h's k and v.
  std::vector<float> wide(mha.qkv_size());
  for (int b = 0; b < s.B; ++b)
    for (int t = 0; t < s.T; ++t)
      for (int h = 0; h < s.NH; ++h)
        for (int i = 0; i < s.HS; ++i) {
          wide[mha.q(b, t, h, i)] = qkv[s.q(b, t, h, i)];
          wide[mha.k(b, t, h, i)] = qkv[s.k(b, t, h / group, i)];
          wide[mha.v(b, t, h, i)] = qkv[s.v(b, t, h / group, i)];
        }
  const Result got = run(qkv, dout, s);
  const Result want = run(wide, dout, mha);
  // A query head's scores, softmax and output see the same values in the same order: bits.
  EXPECT_EQ(got.out, want.out);
  EXPECT_EQ(got.lse, want.lse);
  std::vector<float> dq(s.qkv_size(), 0.0f), want_dq(s.qkv_size(), 0.0f);
  std::vector<double> want_dkv(s.qkv_size(), 0.0);
  std::vector<float> dkv(s.qkv_size(), 0.0f);
  for (int b = 0; b < s.B; ++b)
    for (int t = 0; t < s.T; ++t)
      for (int h = 0; h < s.NH; ++h)
        for (int i = 0; i < s.HS; ++i) {
          dq[s.q(b, t, h, i)] = got.dqkv[s.q(b, t, h, i)];
          want_dq[s.q(b, t, h, i)] = want.dqkv[mha.q(b, t, h, i)];
          want_dkv[s.k(b, t, h / group, i)] += want.dqkv[mha.k(b, t, h, i)];
          want_dkv[s.v(b, t, h / group, i)] += want.dqkv[mha.v(b, t, h, i)];
        }
  for (int b = 0; b < s.B; ++b)
    for (int t = 0; t < s.T; ++t)
      for (int g = 0; g < s.KVH; ++g)
        for (int i = 0; i < s.HS; ++i) {
          dkv[s.k(b, t, g, i)] = got.dqkv[s.k(b, t, g, i)];
          dkv[s.v(b, t, g, i)] = got.dqkv[s.v(b, t, g, i)];
        }
  EXPECT_EQ(dq, want_dq);
  // dk, dv: the kernel adds the group's tile products into one fp32 sum, the reference adds
  // each head's fp32 sum in double: the same terms in another order. At most group * (T / 64
  // + 1) <= 24 fp32 additions of partials of size <= ~3 apart: < 24 * 6e-8 * 3 ~ 5e-6.
  EXPECT_TRUE(all_close("dk, dv", dkv, want_dkv, 1e-5, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Shapes, GqaAttention, ::testing::ValuesIn(kGqaCases),
                         [](const ::testing::TestParamInfo<Gqa>& info) {
                           const Gqa& c = info.param;
                           return "B" + std::to_string(c.B) + "_T" + std::to_string(c.T) +
                                  "_NH" + std::to_string(c.NH) + "_KVH" +
                                  std::to_string(c.KVH) + "_HS" + std::to_string(c.HS);
                         });

TEST(GqaAttentionGrad, BackwardMatchesFiniteDifferencesAndAccumulates) {
  // T = 140: two 64-row query blocks and a ragged one, a full and a ragged key block; groups
  // of 2 so that dk and dv each sum two heads.
  const Gqa s{1, 140, 4, 2, 4};
  auto qkv = random_vector(s.qkv_size(), 901);
  const auto lw = random_vector(s.out_size(), 902);
  std::vector<float> out(s.out_size()), lse(std::size_t(s.NH) * s.T);
  flash_attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C(), s.NH, s.KVH);
  const auto d0 = random_vector(qkv.size(), 903, -0.1f, 0.1f);
  auto dqkv = d0;
  std::vector<float> scratch(flash_attention_backward_scratch_floats(s.B, s.T, s.NH));
  flash_attention_backward(dqkv.data(), scratch.data(), lw.data(), qkv.data(), out.data(),
                           lse.data(), s.B, s.T, s.C(), s.NH, s.KVH);
  auto loss = [&] {
    flash_attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C(), s.NH, s.KVH);
    return weighted_sum(out, lw);
  };
  // As flash_attention_test's: h = 1e-3, truncation ~1e-6; the loss sums T C = 2240 terms
  // <= 1, |L| ~ 50, rounding ~5e-6 over 2h: ~2.5e-3. atol 5e-3, rtol 1e-2.
  EXPECT_TRUE(gradient_matches("dqkv", qkv, accumulated_part(dqkv, d0), loss, 1e-3, 5e-3, 1e-2));
}

TEST(GqaAttentionGrad, KvHeadsEqualHeadsIsTheOldOverloadsBits) {
  const int B = 2, T = 150, NH = 3, C = 48;
  const auto qkv = random_vector(std::size_t(B) * T * 3 * C, 911);
  const auto dout = random_vector(std::size_t(B) * T * C, 912);
  std::vector<float> out1(B * T * C), lse1(B * NH * T), out2 = out1, lse2 = lse1;
  std::vector<float> d1(qkv.size(), 0.0f), d2 = d1;
  std::vector<float> scratch(flash_attention_backward_scratch_floats(B, T, NH));
  flash_attention_forward(out1.data(), lse1.data(), qkv.data(), B, T, C, NH);
  flash_attention_backward(d1.data(), scratch.data(), dout.data(), qkv.data(), out1.data(),
                           lse1.data(), B, T, C, NH);
  flash_attention_forward(out2.data(), lse2.data(), qkv.data(), B, T, C, NH, NH);
  flash_attention_backward(d2.data(), scratch.data(), dout.data(), qkv.data(), out2.data(),
                           lse2.data(), B, T, C, NH, NH);
  EXPECT_EQ(out1, out2);
  EXPECT_EQ(lse1, lse2);
  EXPECT_EQ(d1, d2);
}

TEST(GqaAttentionGrad, BadArgumentsThrowKernelError) {
  std::vector<float> buf(1024, 0.0f);
  // NH = 4 is not divisible by KVH = 3; KVH = 0.
  EXPECT_THROW(flash_attention_forward(buf.data(), buf.data(), buf.data(), 1, 2, 8, 4, 3),
               KernelError);
  EXPECT_THROW(flash_attention_forward(buf.data(), buf.data(), buf.data(), 1, 2, 8, 4, 0),
               KernelError);
  EXPECT_THROW(flash_attention_backward(buf.data(), buf.data(), buf.data(), buf.data(),
                                        buf.data(), buf.data(), 1, 2, 8, 4, 8),
               KernelError);
}

}  // namespace
}  // namespace strata::kernels::cpu
