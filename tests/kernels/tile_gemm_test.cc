// The attention's micro-kernel GEMM (tile_gemm.h) against a naive double loop: odd M, N and K
// around its 6-row groups, 16-column vectors and 64-column chunks; A read in place or transposed; B
// read in place or packed by pack_transposed_chunks; alpha and accumulation; the causal limits; and
// the packed layout itself.
#include "kernels/cpu/tile_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tests/kernels/grad_check.h"

namespace strata::kernels::cpu {
namespace {

using strata::kernels::testing::random_vector;

struct GemmCase {
  int M, N, K;
};

// Rows of 6, vectors of 16 and chunks of 64, each below, at and past a boundary; K = 0 (an empty
// sum) and K not a multiple of anything.
const GemmCase kGemmCases[] = {{1, 1, 1},    {5, 15, 3},    {6, 16, 64}, {7, 17, 77}, {13, 64, 1},
                       {12, 65, 64}, {64, 130, 64}, {3, 256, 5}, {20, 48, 0}};

struct Operands {
  std::vector<float> a, x,
      packed;  // x: B as stored (K x N row-major) or X = B^T (N x K)
};

// C (M, N) = alpha A B + beta C0 in double, and the same over absolute values (which bounds an fp32
// evaluation's rounding error).
void naive(const TileGemm& g, const std::vector<float>& c0, const std::vector<float>& a,
           const auto& b_at, double beta, std::vector<double>& c, std::vector<double>& abs) {
  c.assign(c0.size(), 0.0);
  abs.assign(c0.size(), 0.0);
  for (int i = 0; i < g.M; ++i) {
    for (int j = 0; j < g.N; ++j) {
      double s = 0, sa = 0;
      for (int k = 0; k < g.K; ++k) {
        const double p = double(a[i * g.a_row + k * g.a_k]) * b_at(k, j);
        s += p;
        sa += std::abs(p);
      }
      const double old = c0[i * g.ldc + j];
      c[i * g.ldc + j] = g.alpha * s + beta * old;
      abs[i * g.ldc + j] = std::abs(g.alpha) * sa + std::abs(beta * old);
    }
  }
}

// An fp32 sum of K products (fused or not) is off by at most gamma_K = K u / (1 - K u) of its
// absolute twin (u = 2^-24); alpha's product and the accumulation add a rounding each. Bound: (K +
// 2) u, doubled for the first-order gamma.
double tolerance(int K, double abs) { return 2.0 * (K + 2) * std::ldexp(1.0, -24) * abs; }

using Kernel = void (*)(const TileGemm&);

void run_case(Kernel kernel, const GemmCase& cs, bool transposed_a, bool packed_b, bool accumulate) {
  const auto [M, N, K] = cs;
  SCOPED_TRACE("M " + std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K) +
               (transposed_a ? " A^T" : " A") + (packed_b ? " packed B" : " B") +
               (accumulate ? " +=" : " ="));
  TileGemm g;
  g.M = M;
  g.N = N;
  g.K = K;
  g.ldc = N + 3;  // a stride past the row, as the attention's tiles have
  const std::int64_t lda = (transposed_a ? M : K) + 2;
  const auto a = random_vector(std::size_t((transposed_a ? K : M) + 1) * lda, 11);
  g.a = a.data();
  g.a_row = transposed_a ? 1 : lda;
  g.a_k = transposed_a ? lda : 1;
  std::vector<float> x, packed;
  std::function<double(int, int)> b_at;
  if (packed_b) {
    const std::int64_t ldx = K + 5;
    x = random_vector(std::size_t(N + 1) * ldx, 12);
    packed.assign(std::size_t(packed_transposed_floats(N, K)), NAN);
    if (N > 0) pack_transposed_chunks(packed.data(), x.data(), ldx, N, K);
    g.b = packed.data();
    g.ldb = TileGemm::kChunk;
    g.b_chunk = std::int64_t{TileGemm::kChunk} * K;
    b_at = [&x, ldx](int k, int j) { return double(x[j * ldx + k]); };
  } else {
    const std::int64_t ldx = N + 7;
    x = random_vector(std::size_t(K + 1) * ldx, 13);
    g.b = x.data();
    g.ldb = ldx;
    b_at = [&x, ldx](int k, int j) { return double(x[k * ldx + j]); };
  }
  g.alpha = 0.75f;
  g.accumulate = accumulate;
  auto c = random_vector(std::size_t(M) * g.ldc, 14);
  if (!accumulate) {
    for (int i = 0; i < M; ++i)  // ignored as input: NaN shows any read
      for (int j = 0; j < N; ++j) c[i * g.ldc + j] = NAN;
  }
  const auto c0 = c;
  std::vector<double> want, abs;
  naive(g, accumulate ? c0 : std::vector<float>(c0.size(), 0.0f), a, b_at, accumulate ? 1.0 : 0.0,
        want, abs);
  g.c = c.data();
  kernel(g);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < g.ldc; ++j) {
      const std::int64_t at = i * g.ldc + j;
      if (j >= N) {  // past the row: untouched
        EXPECT_EQ(c[at], c0[at]) << i << "," << j;
      } else {
        EXPECT_NEAR(c[at], want[at], tolerance(K, abs[at])) << i << "," << j;
      }
    }
  }
}

// Every version this CPU runs (isa.h): the portable loops, the AVX2 micro-kernel, the
// AVX-512 one, and kBest (whichever STRATA_CPU_ISA leaves).
std::vector<Kernel> kernels() {
  std::vector<Kernel> all = {[](const TileGemm& g) { tile_gemm(g); },
                             [](const TileGemm& g) { tile_gemm(g, Isa::kBaseline); }};
  if (cpu_isa_level() >= IsaLevel::kAvx2) {
    all.push_back([](const TileGemm& g) { tile_gemm(g, Isa::kAvx2); });
  }
  if (cpu_isa_level() >= IsaLevel::kAvx512) {
    all.push_back([](const TileGemm& g) { tile_gemm(g, Isa::kAvx512); });
  }
  return all;
}

TEST(TileGemm, MatchesNaiveLoopForEveryOperandLayout) {
  for (Kernel kernel : kernels()) {
    for (const GemmCase& cs : kGemmCases) {
      for (bool transposed_a : {false, true}) {
        for (bool packed_b : {false, true}) {
          for (bool accumulate : {false, true}) {
            run_case(kernel, cs, transposed_a, packed_b, accumulate);
          }
        }
      }
    }
  }
}

// The attention's diagonal tiles: A (i, k) is 0 past row i's band, and only columns up to the limit
// are asked for. Every element the limits promise must equal the full product's.
TEST(TileGemm, CausalLimitsKeepEveryPromisedElement) {
  const int M = 70, N = 100, K = 90;
  for (int ahead : {0, 7, 64}) {
    for (Kernel kernel : kernels()) {
      SCOPED_TRACE("ahead " + std::to_string(ahead));
      // k_hi: row i sums k <= i + ahead (scores times values); A zero past it. k_lo: row i sums k
      // >= i - ahead (probabilities^T times dout); A zero before it.
      for (bool upper : {true, false}) {
        auto a = random_vector(std::size_t(M) * K, 21);
        for (int i = 0; i < M; ++i)
          for (int k = 0; k < K; ++k)
            if (upper ? k > i + ahead : k < i - ahead) a[i * K + k] = 0.0f;
        const auto b = random_vector(std::size_t(K) * N, 22);
        TileGemm g;
        g.M = M;
        g.N = N;
        g.K = K;
        g.ldc = N;
        g.a = a.data();
        g.a_row = K;
        g.a_k = 1;
        g.b = b.data();
        g.ldb = N;
        (upper ? g.k_hi : g.k_lo) = ahead;
        g.n_hi = upper ? ahead : TileGemm::kNoLimit;
        std::vector<float> c(std::size_t(M) * N, NAN);
        g.c = c.data();
        kernel(g);
        for (int i = 0; i < M; ++i) {
          for (int j = 0; j < N && (!upper || j <= i + ahead); ++j) {
            double s = 0, sa = 0;
            for (int k = 0; k < K; ++k) {
              s += double(a[i * K + k]) * b[k * N + j];
              sa += std::abs(double(a[i * K + k]) * b[k * N + j]);
            }
            EXPECT_NEAR(c[i * N + j], s, tolerance(K, sa)) << i << "," << j;
          }
        }
      }
    }
  }
}

// The vector kernels' promise (tile_gemm.h): C (i, j) is alpha times one chain of fused
// multiply-adds over k in increasing order from 0 (std::fma, written out here), plus C's old
// value when accumulating; so the AVX2 and AVX-512 kernels give the same bits, and any machine
// gives the same bits as a GPU-less CI machine's. Every operand layout, and sizes around the
// 8-lane and 16-lane vectors and the 6-row groups.
TEST(TileGemm, VectorKernelsAreOneFusedChainInKOrderBitForBit) {
  if (cpu_isa_level() < IsaLevel::kAvx2) GTEST_SKIP() << "this CPU has no AVX2 with FMA";
  const GemmCase cases[] = {{1, 1, 1}, {7, 9, 5}, {6, 24, 64}, {13, 130, 77}, {20, 48, 0}};
  std::vector<Kernel> vector_kernels = {[](const TileGemm& g) { tile_gemm(g, Isa::kAvx2); }};
  if (cpu_isa_level() >= IsaLevel::kAvx512) {
    vector_kernels.push_back([](const TileGemm& g) { tile_gemm(g, Isa::kAvx512); });
  }
  for (Kernel kernel : vector_kernels) {
    for (const GemmCase& cs : cases) {
      for (bool packed_b : {false, true}) {
        for (bool accumulate : {false, true}) {
          const auto [M, N, K] = cs;
          SCOPED_TRACE("M " + std::to_string(M) + " N " + std::to_string(N) + " K " +
                       std::to_string(K) + (packed_b ? " packed B" : " B") +
                       (accumulate ? " +=" : " ="));
          const auto a = random_vector(std::size_t(M) * (K + 1), 41);
          const auto x = random_vector(std::size_t(K + 1) * (N + 1), 42);  // X = B^T, N x K
          std::vector<float> packed(std::size_t(packed_transposed_floats(N, K)), NAN);
          if (N > 0 && packed_b) pack_transposed_chunks(packed.data(), x.data(), K + 1, N, K);
          std::vector<float> b(std::size_t(K) * N);  // B row-major, K x N
          for (int k = 0; k < K; ++k)
            for (int j = 0; j < N; ++j) b[std::size_t(k) * N + j] = x[std::size_t(j) * (K + 1) + k];
          TileGemm g;
          g.M = M;
          g.N = N;
          g.K = K;
          g.ldc = N;
          g.a = a.data();
          g.a_row = K + 1;
          g.a_k = 1;
          g.b = packed_b ? packed.data() : b.data();
          g.ldb = packed_b ? TileGemm::kChunk : N;
          g.b_chunk = packed_b ? std::int64_t{TileGemm::kChunk} * K : TileGemm::kChunk;
          g.alpha = 0.75f;
          g.accumulate = accumulate;
          auto c = random_vector(std::size_t(M) * N, 43);
          const auto c0 = c;
          g.c = c.data();
          kernel(g);
          for (int i = 0; i < M; ++i) {
            for (int j = 0; j < N; ++j) {
              float chain = 0.0f;
              for (int k = 0; k < K; ++k)
                chain = std::fma(a[std::size_t(i) * (K + 1) + k], b[std::size_t(k) * N + j], chain);
              float want = g.alpha * chain;
              if (accumulate) want = c0[std::size_t(i) * N + j] + want;
              ASSERT_EQ(c[std::size_t(i) * N + j], want) << i << "," << j;
            }
          }
        }
      }
    }
  }
}

TEST(TileGemm, PackedChunksHoldTheTransposeAndZeroPadding) {
  for (Isa isa : {Isa::kBest, Isa::kBaseline}) {  // the AVX-512 gather, the scalar loop
    for (int n : {1, 15, 16, 63, 64, 65, 130}) {
      for (int cols : {1, 3, 64}) {
        SCOPED_TRACE("n " + std::to_string(n) + " cols " + std::to_string(cols));
        const std::int64_t ldx = cols + 9;
        const auto x = random_vector(std::size_t(n) * ldx, 31);
        const int chunks = (n + 63) / 64;
        ASSERT_EQ(packed_transposed_floats(n, cols), std::int64_t{chunks} * 64 * cols);
        std::vector<float> out(std::size_t(packed_transposed_floats(n, cols)), NAN);
        pack_transposed_chunks(out.data(), x.data(), ldx, n, cols, isa);
        for (int j = 0; j < chunks * 64; ++j) {
          for (int k = 0; k < cols; ++k) {
            const float got = out[(j / 64) * 64 * cols + k * 64 + j % 64];
            EXPECT_EQ(got, j < n ? x[j * ldx + k] : 0.0f) << j << "," << k;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata::kernels::cpu
