// Register-blocked GEMM for the attention's tiles (see tile_gemm.h).
//
// AVX-512 (chosen at run time; the build targets baseline x86-64): the micro-kernel keeps a 6 x (16
// NV) block of C in registers (6 x 64: 24 accumulators, 4 B vectors and a broadcast of A's element,
// 29 of the 32 registers) and walks k: each step loads NV vectors of B's row k and broadcasts 6
// elements of A's column k, for 6 NV fused multiply-adds. A last partial vector of columns (N % 16)
// is loaded and stored under a mask. Elsewhere a plain loop does the same sums in the same k order
// (without fusing the multiply-adds).
//
// AVX2 with FMA (the x86-64 CPUs without AVX-512: AMD before Zen 4, Intel's client cores): the
// same walk with 8-float vectors, a 6 x 16 block of C (12 accumulators, 2 B vectors and the
// broadcast: 15 of the 16 registers), four blocks to a chunk. Its sums are the AVX-512 kernel's
// (one fused multiply-add per k, in k order, then alpha, then the accumulation), so the two give
// the same bits; only the portable loop differs. On a Zen 1 core the portable loop (a strided
// scalar dot product per element) was a third of a tiny GPT's training step.
#include "kernels/cpu/tile_gemm.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "kernels/check.h"
#include "kernels/cpu/isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define STRATA_TILE_GEMM_AVX512 1
#endif

namespace strata::kernels::cpu {
namespace {

constexpr int kLanes = 16;
constexpr int kRows = 6;

// One row group's work: rows [i0, i0 + mr), columns [0, n), k in [k0, k1).
struct Group {
  int i0, mr, n, k0, k1;
};

// The causal limits of TileGemm applied to the group of rows starting at i0: the k range of its
// rows together, and its columns up to the last row's limit, rounded up to whole vectors.
Group group_at(const TileGemm& g, int i0) {
  const int mr = std::min(kRows, g.M - i0);
  const std::int64_t last = i0 + mr - 1;
  const int k0 = static_cast<int>(std::clamp<std::int64_t>(i0 - std::int64_t{g.k_lo}, 0, g.K));
  const int k1 = static_cast<int>(std::clamp<std::int64_t>(last + g.k_hi + 1, k0, g.K));
  const std::int64_t n_lim = last + g.n_hi + 1;
  const int n = static_cast<int>(std::min<std::int64_t>(
      g.N, std::max<std::int64_t>(0, (n_lim + kLanes - 1) / kLanes * kLanes)));
  return {i0, mr, n, k0, k1};
}

const float* b_at(const TileGemm& g, int j) {
  return g.b + (j / TileGemm::kChunk) * g.b_chunk + j % TileGemm::kChunk;
}

void portable_group(const TileGemm& g, const Group& r) {
  for (int i = r.i0; i < r.i0 + r.mr; ++i) {
    for (int j = 0; j < r.n; ++j) {
      const float* bj = b_at(g, j);
      float sum = 0.0f;
      for (int k = r.k0; k < r.k1; ++k) sum += g.a[i * g.a_row + k * g.a_k] * bj[k * g.ldb];
      float& out = g.c[i * g.ldc + j];
      out = g.accumulate ? out + g.alpha * sum : g.alpha * sum;
    }
  }
}

#ifdef STRATA_TILE_GEMM_AVX512

#define STRATA_AVX512 __attribute__((target("avx512f,fma")))

// C block (MR, 16 NV) at c = alpha * sum_{k in [k0, k1)} A (i, k) B (k, :) (+ C); the last vector's
// lanes limited by `tail` (all 16 set but for a partial last vector).
template <int MR, int NV>
STRATA_AVX512 inline __attribute__((always_inline)) void micro(const TileGemm& g, float* c,
                                                               const float* a, const float* b,
                                                               int k0, int k1, __mmask16 tail) {
  const std::int64_t ldb = g.ldb, a_k = g.a_k, a_row = g.a_row, ldc = g.ldc;
  // Every loop over MR and NV unrolled by pragma, so that GCC turns acc and bv into registers
  // before register allocation (left to later passes, it kept acc on the stack in one build: 2x
  // slower).
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  const float* bk = b + k0 * ldb;
  const float* ak = a + k0 * a_k;
  for (int k = k0; k < k1; ++k, bk += ldb, ak += a_k) {
    __m512 bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV - 1; ++v) bv[v] = _mm512_loadu_ps(bk + v * kLanes);
    bv[NV - 1] = _mm512_maskz_loadu_ps(tail, bk + (NV - 1) * kLanes);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(ak[i * a_row]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
    }
  }
  const __m512 alpha = _mm512_set1_ps(g.alpha);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      float* out = c + i * ldc + v * kLanes;
      const __mmask16 m = v == NV - 1 ? tail : __mmask16{0xffff};
      __m512 x = _mm512_mul_ps(alpha, acc[i][v]);
      if (g.accumulate) x = _mm512_add_ps(_mm512_maskz_loadu_ps(m, out), x);
      _mm512_mask_storeu_ps(out, m, x);
    }
  }
}

template <int MR>
STRATA_AVX512 inline __attribute__((always_inline)) void micro_cols(const TileGemm& g, int nv,
                                                                    float* c, const float* a,
                                                                    const float* b, int k0, int k1,
                                                                    __mmask16 tail) {
  switch (nv) {
    case 4: micro<MR, 4>(g, c, a, b, k0, k1, tail); break;
    case 3: micro<MR, 3>(g, c, a, b, k0, k1, tail); break;
    case 2: micro<MR, 2>(g, c, a, b, k0, k1, tail); break;
    default: micro<MR, 1>(g, c, a, b, k0, k1, tail); break;
  }
}

// Columns [j0, j0 + 64) of a group of rows (fewer where the group's columns end).
STRATA_AVX512 void avx512_chunk(const TileGemm& g, const Group& r, int j0) {
  const float* a = g.a + r.i0 * g.a_row;
  float* c = g.c + r.i0 * g.ldc + j0;
  const int cols = std::min(TileGemm::kChunk, r.n - j0);
  const int nv = (cols + kLanes - 1) / kLanes;
  const int last = cols - (nv - 1) * kLanes;  // 1..16 columns in the last vector
  const __mmask16 tail = static_cast<__mmask16>((1u << last) - 1u);
  const float* b = b_at(g, j0);
  switch (r.mr) {
    case 6: micro_cols<6>(g, nv, c, a, b, r.k0, r.k1, tail); break;
    case 5: micro_cols<5>(g, nv, c, a, b, r.k0, r.k1, tail); break;
    case 4: micro_cols<4>(g, nv, c, a, b, r.k0, r.k1, tail); break;
    case 3: micro_cols<3>(g, nv, c, a, b, r.k0, r.k1, tail); break;
    case 2: micro_cols<2>(g, nv, c, a, b, r.k0, r.k1, tail); break;
    default: micro_cols<1>(g, nv, c, a, b, r.k0, r.k1, tail); break;
  }
}

// Chunks outer, row groups inner: a chunk of B (64 columns by K) stays in L1 while every group of
// rows meets it (the score tiles' B is 2 chunks at a key block of 128; measured a few percent over
// groups outer, within this VM's noise).
STRATA_AVX512 void avx512_gemm(const TileGemm& g) {
  for (int j0 = 0; j0 < g.N; j0 += TileGemm::kChunk) {
    for (int i0 = 0; i0 < g.M; i0 += kRows) {
      const Group r = group_at(g, i0);
      if (j0 < r.n) avx512_chunk(g, r, j0);
    }
  }
}


constexpr int kLanes8 = 8;
constexpr int kBlockCols = 2 * kLanes8;  // columns of C one AVX2 micro-kernel call covers

// C block (MR, 8 NV) at c, as micro() above; the last vector's lanes limited by `tail` (a lane
// is kept where its 32 bits are all ones).
template <int MR, int NV>
STRATA_TARGET_AVX2 inline __attribute__((always_inline)) void micro_avx2(const TileGemm& g, float* c,
                                                                    const float* a, const float* b,
                                                                    int k0, int k1, __m256i tail) {
  const std::int64_t ldb = g.ldb, a_k = g.a_k, a_row = g.a_row, ldc = g.ldc;
  __m256 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
  const float* bk = b + k0 * ldb;
  const float* ak = a + k0 * a_k;
  for (int k = k0; k < k1; ++k, bk += ldb, ak += a_k) {
    __m256 bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV - 1; ++v) bv[v] = _mm256_loadu_ps(bk + v * kLanes8);
    bv[NV - 1] = _mm256_maskload_ps(bk + (NV - 1) * kLanes8, tail);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 ai = _mm256_broadcast_ss(ak + i * a_row);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(ai, bv[v], acc[i][v]);
    }
  }
  const __m256 alpha = _mm256_set1_ps(g.alpha);
  const __m256i all = _mm256_set1_epi32(-1);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      float* out = c + i * ldc + v * kLanes8;
      const __m256i m = v == NV - 1 ? tail : all;
      __m256 x = _mm256_mul_ps(alpha, acc[i][v]);
      if (g.accumulate) x = _mm256_add_ps(_mm256_maskload_ps(out, m), x);
      _mm256_maskstore_ps(out, m, x);
    }
  }
}

template <int MR>
STRATA_TARGET_AVX2 inline __attribute__((always_inline)) void micro_avx2_cols(
    const TileGemm& g, int nv, float* c, const float* a, const float* b, int k0, int k1,
    __m256i tail) {
  if (nv == 2) {
    micro_avx2<MR, 2>(g, c, a, b, k0, k1, tail);
  } else {
    micro_avx2<MR, 1>(g, c, a, b, k0, k1, tail);
  }
}

// Columns [j0, j0 + 16) of a group of rows (fewer where the group's columns end); j0 is a
// multiple of 16, so the block lies inside one 64-column chunk of B.
STRATA_TARGET_AVX2 void avx2_block(const TileGemm& g, const Group& r, int j0) {
  const float* a = g.a + r.i0 * g.a_row;
  float* c = g.c + r.i0 * g.ldc + j0;
  const int cols = std::min(kBlockCols, r.n - j0);
  const int nv = (cols + kLanes8 - 1) / kLanes8;
  const int last = cols - (nv - 1) * kLanes8;  // 1..8 columns in the last vector
  const __m256i tail =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(last), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const float* b = b_at(g, j0);
  switch (r.mr) {
    case 6: micro_avx2_cols<6>(g, nv, c, a, b, r.k0, r.k1, tail); break;
    case 5: micro_avx2_cols<5>(g, nv, c, a, b, r.k0, r.k1, tail); break;
    case 4: micro_avx2_cols<4>(g, nv, c, a, b, r.k0, r.k1, tail); break;
    case 3: micro_avx2_cols<3>(g, nv, c, a, b, r.k0, r.k1, tail); break;
    case 2: micro_avx2_cols<2>(g, nv, c, a, b, r.k0, r.k1, tail); break;
    default: micro_avx2_cols<1>(g, nv, c, a, b, r.k0, r.k1, tail); break;
  }
}

// The AVX-512 kernel's order: chunks outer, row groups inner, then the chunk's 16-column blocks.
STRATA_TARGET_AVX2 void avx2_gemm(const TileGemm& g) {
  for (int j0 = 0; j0 < g.N; j0 += TileGemm::kChunk) {
    for (int i0 = 0; i0 < g.M; i0 += kRows) {
      const Group r = group_at(g, i0);
      const int end = std::min(r.n, j0 + TileGemm::kChunk);
      for (int jb = j0; jb < end; jb += kBlockCols) avx2_block(g, r, jb);
    }
  }
}

#endif  // STRATA_TILE_GEMM_AVX512

}  // namespace

void tile_gemm(const TileGemm& g, Isa isa) {
  const IsaLevel level = isa_level_for(isa, "tile_gemm");
#ifdef STRATA_TILE_GEMM_AVX512
  if (level == IsaLevel::kAvx512) {
    avx512_gemm(g);
    return;
  }
  if (level == IsaLevel::kAvx2) {
    avx2_gemm(g);
    return;
  }
#endif
  for (int i0 = 0; i0 < g.M; i0 += kRows) portable_group(g, group_at(g, i0));
}

std::int64_t packed_transposed_floats(int n, int cols) {
  const std::int64_t chunks = (n + TileGemm::kChunk - 1) / TileGemm::kChunk;
  return chunks * TileGemm::kChunk * cols;
}

namespace {

// Rows [j0, j0 + rows) of x into a chunk, transposed: chunk[k * 64 + j] = x (j0 + j, k).
void transpose_rows(float* chunk, const float* x, std::int64_t ldx, int j0, int rows, int cols,
                    int j_begin) {
  for (int j = j_begin; j < rows; ++j) {
    const float* src = x + (j0 + j) * ldx;
    for (int k = 0; k < cols; ++k) chunk[k * TileGemm::kChunk + j] = src[k];
  }
}

#ifdef STRATA_TILE_GEMM_AVX512
// Whole groups of 16 rows with one gather per 16 outputs (column k of 16 rows of x): the scalar
// loop's stores, each to another cache line, cost ~3 cycles an element and were an eighth of the
// attention's time at T = 256. Returns how many rows it did.
STRATA_AVX512 int transpose_rows16(float* chunk, const float* x, std::int64_t ldx, int j0, int rows,
                                   int cols) {
  if (ldx * (kLanes - 1) > INT32_MAX) return 0;
  const __m512i offsets =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(static_cast<int>(ldx)));
  const int whole = rows / kLanes * kLanes;
  for (int j = 0; j < whole; j += kLanes) {
    const float* src = x + (j0 + j) * ldx;
    for (int k = 0; k < cols; ++k) {
      _mm512_storeu_ps(chunk + k * TileGemm::kChunk + j,
                       _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xffff, offsets, src + k, 4));
    }
  }
  return whole;
}
#endif

}  // namespace

void pack_transposed_chunks(float* out, const float* x, std::int64_t ldx, int n, int cols,
                            Isa isa) {
  constexpr int kC = TileGemm::kChunk;
  [[maybe_unused]] const bool gather = use_avx512(isa, "pack_transposed_chunks");
  for (int j0 = 0; j0 < n; j0 += kC) {
    float* chunk = out + static_cast<std::int64_t>(j0 / kC) * kC * cols;
    const int rows = std::min(kC, n - j0);
    int done = 0;
#ifdef STRATA_TILE_GEMM_AVX512
    if (gather) done = transpose_rows16(chunk, x, ldx, j0, rows, cols);
#endif
    transpose_rows(chunk, x, ldx, j0, rows, cols, done);
    for (int j = rows; j < kC; ++j) {
      for (int k = 0; k < cols; ++k) chunk[k * kC + j] = 0.0f;
    }
  }
}

}  // namespace strata::kernels::cpu
