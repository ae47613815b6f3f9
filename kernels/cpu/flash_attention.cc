// Tiled causal attention over tile_gemm with an online softmax (see flash_attention.h).
//
// Work split: the forward's tasks are (b, h, query block), the backward's (b, h): a task owns
// every output element it writes (out and lse rows; dq, dk, dv of its head), so there are no
// atomics and no cross-thread sums, and the order of every sum is fixed by the loop order and
// tile_gemm's (each element one sum in k order). A query block of kQueryBlock rows meets the
// keys before its end in key blocks of kKeyBlock columns, a multiple of kQueryBlock starting at
// multiples of it, so every key block starts at or before the query block: row r of a tile
// sees its first min(cols, i0 - j0 + r + 1) >= 1 columns (only the last key block is cut by
// the diagonal), and the online softmax never meets an all-masked row. On that diagonal
// block the GEMMs skip what the mask zeroes (tile_gemm's causal limits): score columns past a
// row's diagonal are not computed, and the sums over keys or queries stop where the
// probabilities turn 0 (a fifth of the work at T = 256).
//
// The score GEMMs' B is the head's K^T or V^T, packed once per head (pack_transposed_chunks);
// the others read their operands in place. OpenBLAS packed both operands on every tile-sized
// call (K = 64), a fifth of the time.
//
// The row loops (max, exp, rescale) are `omp simd` over fast_expf; the file is compiled with
// -fno-trapping-math so GCC if-converts fast_expf's selects, and the row loops are compiled
// for x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA) and the baseline, because the build targets
// baseline x86-64. The versions give different bits (see STRATA_ROW_LOOP), so the one that
// runs is the call's IsaLevel (isa.h: the CPU's, or STRATA_CPU_ISA's cap), resolved once per
// call before the parallel region, never an ifunc's choice that nothing can override.
#include "kernels/cpu/flash_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/arg_checks.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/fast_exp_avx512.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/tile_gemm.h"

// A row loop's three versions: name##_avx512, name##_avx2 and name##_baseline, each the
// always-inline body name##_body compiled under its target (x86-64-v4, x86-64-v3,
// baseline), for version_for (isa.h) to pick. Their bits differ: the simd reductions (the row sums and
// dots) add 16, 8 or 4 lanes, and x86-64-v3 and v4 fuse multiply-adds.
#if defined(__x86_64__) && defined(__GNUC__)
#define STRATA_ROW_LOOP(name, params, args)                                \
  STRATA_TARGET_X86_64_V4 void name##_avx512 params { name##_body args; } \
  STRATA_TARGET_X86_64_V3 void name##_avx2 params { name##_body args; }   \
  void name##_baseline params { name##_body args; }
#else
#define STRATA_ROW_LOOP(name, params, args)        \
  void name##_avx512 params { name##_body args; } \
  void name##_avx2 params { name##_body args; }   \
  void name##_baseline params { name##_body args; }
#endif

namespace strata::kernels::cpu {
namespace {

// Threads for `flops` of work: one per kMinFlopsPerThread (about 100 us at the ~40 GFLOP/s a
// core reached on the OpenBLAS tiles; 40 us at the ~100 of tile_gemm's, not re-tuned), at most
// the OpenMP maximum and the task count. Waking a
// second thread costs microseconds on an idle machine and milliseconds on a busy one (a
// 2-core VM shared with a compile: 7x slower steps at tiny shapes when every call forked).
constexpr double kMinFlopsPerThread = 4e6;

int threads_for(double flops, std::int64_t tasks) {
  const double by_work = std::max(1.0, std::floor(flops / kMinFlopsPerThread));
  const double cap = static_cast<double>(std::min<std::int64_t>(omp_get_max_threads(), tasks));
  return static_cast<int>(std::min(by_work, cap));
}

// Block sizes. A 64 x 128 fp32 tile is 32 KiB (the backward holds two), and a key block's K or
// V rows (128 x HS 64) are 32 KiB: the B operand of the tile GEMMs over keys stays in the
// 48 KiB L1 while every 6-row group meets it. Measured forward + backward CPU time at HS 64,
// one thread, tile_gemm (cpu_attention_bench, 2026-11-24, a loaded VM, so within ~5%):
// 64 x 128, 128 x 128 and 64 x 256 alike at T = 256 and 1024; 64 x 128 kept for the smaller
// wasted diagonal (query rows). (With OpenBLAS, whose per-call packing favoured large tiles,
// 64 x 256 had beaten 64 x 64 by 1.2x.)
constexpr int kQueryBlock = 64;
constexpr int kKeyBlock = 128;
static_assert(kKeyBlock % kQueryBlock == 0);
// Row stride of the score tiles: 16 floats past kKeyBlock, so that a column's consecutive rows
// fall in different L1 sets. At a stride of 512 bytes (or any multiple of 1 KiB) the
// transposed reads of p^T dout and ds^T q met 4 of the 64 sets and missed L1.
constexpr int kTileLd = kKeyBlock + 16;

void check_shapes(const char* kernel, int B, int T, int C, int NH, int KVH) {
  detail::require_positive(kernel, "B", B);
  detail::require_positive(kernel, "T", T);
  detail::require_positive(kernel, "C", C);
  detail::require_positive(kernel, "NH", NH);
  detail::require_positive(kernel, "KVH", KVH);
  if (C % NH != 0) {
    throw KernelError(fmt::format("{}: C = {} is not divisible by NH = {}; expected C = NH * HS",
                                  kernel, C, NH));
  }
  if (NH % KVH != 0) {
    throw KernelError(fmt::format("{}: NH = {} is not divisible by KVH = {}; expected groups "
                                  "of NH / KVH query heads per key/value head",
                                  kernel, NH, KVH));
  }
}

// Keys row r of a tile may see, `ahead` = i0 - j0 being how far the query block starts past
// the key block's start.
inline int visible(int ahead, int r, int cols) { return std::min(cols, ahead + r + 1); }

// One key block's online-softmax step for a query block. s: (rows, cols; stride kTileLd) scores
// in, exp(s - m_new) out (0 where masked); m, l: running row max and sum of exp, updated;
// alpha[r] = exp(m_old - m_new), by which the caller rescales the row's output so far.
[[gnu::always_inline]] inline void online_softmax_rows_body(float* s, int rows, int cols, int ahead,
                                                       float* m, float* l, float* alpha) {
  for (int r = 0; r < rows; ++r) {
    float* row = s + static_cast<std::int64_t>(r) * kTileLd;
    const int n = visible(ahead, r, cols);
    float mx = m[r];
#pragma omp simd reduction(max : mx)
    for (int c = 0; c < n; ++c) mx = row[c] > mx ? row[c] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < n; ++c) {
      const float e = fast_expf(row[c] - mx);
      row[c] = e;
      sum += e;
    }
    for (int c = n; c < cols; ++c) row[c] = 0.0f;
    alpha[r] = fast_expf(m[r] - mx);  // m[r] = -inf before the first block: alpha = 0
    l[r] = l[r] * alpha[r] + sum;
    m[r] = mx;
  }
}
STRATA_ROW_LOOP(online_softmax_rows,
                (float* s, int rows, int cols, int ahead, float* m, float* l, float* alpha),
                (s, rows, cols, ahead, m, l, alpha))

// rows x len strided rows (stride ld) each multiplied by its factor.
[[gnu::always_inline]] inline void scale_rows_body(float* x, std::int64_t ld, int rows, int len,
                                                   const float* factor) {
  for (int r = 0; r < rows; ++r) {
    float* row = x + r * ld;
    const float a = factor[r];
#pragma omp simd
    for (int i = 0; i < len; ++i) row[i] *= a;
  }
}
STRATA_ROW_LOOP(scale_rows,
                (float* x, std::int64_t ld, int rows, int len, const float* factor),
                (x, ld, rows, len, factor))

// The backward's probabilities: s (rows, cols) scaled scores in, exp(s - lse) out, 0 where
// masked. Bit-identical to the forward's exp of the same scores up to the forward's running
// max (the forward divided by l at the end instead).
[[gnu::always_inline]] inline void probs_rows_body(float* s, int rows, int cols, int ahead,
                                              const float* lse) {
  for (int r = 0; r < rows; ++r) {
    float* row = s + static_cast<std::int64_t>(r) * kTileLd;
    const int n = visible(ahead, r, cols);
    const float shift = lse[r];
#pragma omp simd
    for (int c = 0; c < n; ++c) row[c] = fast_expf(row[c] - shift);
    for (int c = n; c < cols; ++c) row[c] = 0.0f;
  }
}
STRATA_ROW_LOOP(probs_rows, (float* s, int rows, int cols, int ahead, const float* lse),
                (s, rows, cols, ahead, lse))

#ifdef STRATA_HAVE_FAST_EXP_AVX512
// online_softmax_tile and probs_tile over fast_exp16, for CPUs with AVX-512 (the exp was a
// sixth of the time at T = 256 in the portable versions). Same results up to the exp's
// rounding and the row sum's order (16 lanes, then the lanes in order), both fixed.
#define STRATA_ROW_AVX512 __attribute__((target("avx512f")))

// Lanes [c, c + 16) of a row of n: all, or the first n - c.
STRATA_ROW_AVX512 inline __mmask16 lanes_from(int c, int n) {
  return n - c >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << (n - c)) - 1u);
}

// A vector's lanes folded in lane order (GCC 12's _mm512_reduce_* warn of an uninitialized
// operand). sum: the row sum's order, fixed.
STRATA_ROW_AVX512 inline float lanes_max(__m512 v) {
  alignas(64) float x[16];
  _mm512_store_ps(x, v);
  float m = x[0];
  for (int i = 1; i < 16; ++i) m = x[i] > m ? x[i] : m;
  return m;
}
STRATA_ROW_AVX512 inline float lanes_sum(__m512 v) {
  alignas(64) float x[16];
  _mm512_store_ps(x, v);
  float s = 0.0f;
  for (float e : x) s += e;
  return s;
}

STRATA_ROW_AVX512 void online_softmax_exp16(float* s, int rows, int cols, int ahead,
                                                  float* m, float* l, float* alpha) {
  for (int r = 0; r < rows; ++r) {
    float* row = s + static_cast<std::int64_t>(r) * kTileLd;
    const int n = visible(ahead, r, cols);
    // vmaxps returns its second operand when either is NaN: NaN scores are skipped, as the
    // portable loop's compare skips them.
    __m512 mx = _mm512_set1_ps(m[r]);
    for (int c = 0; c < n; c += 16) {
      const __m512 x = _mm512_mask_loadu_ps(mx, lanes_from(c, n), row + c);
      mx = _mm512_maskz_max_ps(0xffff, x, mx);
    }
    const float row_max = lanes_max(mx);
    const __m512 shift = _mm512_set1_ps(row_max);
    __m512 sum = _mm512_setzero_ps();
    for (int c = 0; c < n; c += 16) {
      const __mmask16 k = lanes_from(c, n);
      const __m512 e = fast_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + c), shift));
      _mm512_mask_storeu_ps(row + c, k, e);
      sum = _mm512_mask_add_ps(sum, k, sum, e);
    }
    for (int c = n; c < cols; ++c) row[c] = 0.0f;
    alpha[r] = fast_expf(m[r] - row_max);  // m[r] = -inf before the first block: alpha = 0
    l[r] = l[r] * alpha[r] + lanes_sum(sum);
    m[r] = row_max;
  }
}

STRATA_ROW_AVX512 void probs_exp16(float* s, int rows, int cols, int ahead,
                                         const float* lse) {
  for (int r = 0; r < rows; ++r) {
    float* row = s + static_cast<std::int64_t>(r) * kTileLd;
    const int n = visible(ahead, r, cols);
    const __m512 shift = _mm512_set1_ps(lse[r]);
    for (int c = 0; c < n; c += 16) {
      const __mmask16 k = lanes_from(c, n);
      _mm512_mask_storeu_ps(
          row + c, k, fast_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + c), shift)));
    }
    for (int c = n; c < cols; ++c) row[c] = 0.0f;
  }
}
#endif

// The row loops above for `level`; at AVX-512 the fast_exp16 ones.
void softmax_step(IsaLevel level, float* s, int rows, int cols, int ahead, float* m, float* l,
                  float* alpha) {
#ifdef STRATA_HAVE_FAST_EXP_AVX512
  if (level == IsaLevel::kAvx512) {
    online_softmax_exp16(s, rows, cols, ahead, m, l, alpha);
    return;
  }
#endif
  version_for(level, online_softmax_rows_avx512, online_softmax_rows_avx2,
              online_softmax_rows_baseline)(s, rows, cols, ahead, m, l, alpha);
}

void probs(IsaLevel level, float* s, int rows, int cols, int ahead, const float* lse) {
#ifdef STRATA_HAVE_FAST_EXP_AVX512
  if (level == IsaLevel::kAvx512) {
    probs_exp16(s, rows, cols, ahead, lse);
    return;
  }
#endif
  version_for(level, probs_rows_avx512, probs_rows_avx2, probs_rows_baseline)(s, rows, cols,
                                                                              ahead, lse);
}

void scale_rows(IsaLevel level, float* x, std::int64_t ld, int rows, int len,
                const float* factor) {
  version_for(level, scale_rows_avx512, scale_rows_avx2, scale_rows_baseline)(x, ld, rows, len,
                                                                              factor);
}

// Softmax backward on a tile, scale folded in: dp (rows, cols) = dout V^T in,
// dS = scale * p (dp - D) out, where D[r] = dout_r . out_r = sum_c p dp over the full row;
// 0 where masked (dp is not computed there: tile_gemm's causal limit).
[[gnu::always_inline]] inline void dscores_rows_body(float* dp, const float* p, int rows, int cols,
                                                int ahead, const float* D, float scale) {
  for (int r = 0; r < rows; ++r) {
    float* row = dp + static_cast<std::int64_t>(r) * kTileLd;
    const float* pr = p + static_cast<std::int64_t>(r) * kTileLd;
    const int n = visible(ahead, r, cols);
    const float d = D[r];
#pragma omp simd
    for (int c = 0; c < n; ++c) row[c] = scale * pr[c] * (row[c] - d);
    for (int c = n; c < cols; ++c) row[c] = 0.0f;
  }
}
STRATA_ROW_LOOP(dscores_rows,
                (float* dp, const float* p, int rows, int cols, int ahead, const float* D,
                 float scale),
                (dp, p, rows, cols, ahead, D, scale))

// D[t] = dout_t . out_t for the T rows of one head (strided by C).
[[gnu::always_inline]] inline void row_dots_body(float* D, const float* dout, const float* out,
                                                 int T, int HS, std::int64_t ld) {
  for (int t = 0; t < T; ++t) {
    const float* a = dout + t * ld;
    const float* b = out + t * ld;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int i = 0; i < HS; ++i) dot += a[i] * b[i];
    D[t] = dot;
  }
}
STRATA_ROW_LOOP(row_dots,
                (float* D, const float* dout, const float* out, int T, int HS, std::int64_t ld),
                (D, dout, out, T, HS, ld))

void dscores(IsaLevel level, float* dp, const float* p, int rows, int cols, int ahead,
             const float* D, float scale) {
  version_for(level, dscores_rows_avx512, dscores_rows_avx2, dscores_rows_baseline)(
      dp, p, rows, cols, ahead, D, scale);
}

void row_dots(IsaLevel level, float* D, const float* dout, const float* out, int T, int HS,
              std::int64_t ld) {
  version_for(level, row_dots_avx512, row_dots_avx2, row_dots_baseline)(D, dout, out, T, HS, ld);
}

struct Shape {
  int B, T, C, NH, HS;
  int KVH;           // key/value heads; query head h reads KV head h / (NH / KVH)
  std::int64_t KVC;  // KVH * HS: the width of qkv's k and v parts
  std::int64_t C3;   // qkv's row stride, C + 2 KVC (3 C without grouping)
  float scale;
  int blocks;  // query blocks per sequence
  IsaLevel level;  // every loop's version, resolved once before the parallel region

  Shape(int B_, int T_, int C_, int NH_, int KVH_, IsaLevel level_)
      : B(B_), T(T_), C(C_), NH(NH_), HS(C_ / NH_), KVH(KVH_),
        KVC(static_cast<std::int64_t>(KVH_) * (C_ / NH_)), C3(C_ + 2 * KVC),
        scale(1.0f / std::sqrt(static_cast<float>(C_ / NH_))),
        blocks((T_ + kQueryBlock - 1) / kQueryBlock), level(level_) {}
  int kv_head(int h) const { return h / (NH / KVH); }
  // Rows [t0, t0 + kQueryBlock) clipped to T.
  int rows_from(int t0) const { return std::min(kQueryBlock, T - t0); }
  // Offsets of position t of sequence b, head h, in qkv's q part and in a (B, T, C) tensor.
  std::int64_t qkv_at(int b, int t, int h) const {
    return (static_cast<std::int64_t>(b) * T + t) * C3 + static_cast<std::int64_t>(h) * HS;
  }
  std::int64_t act_at(int b, int t, int h) const {
    return (static_cast<std::int64_t>(b) * T + t) * C + static_cast<std::int64_t>(h) * HS;
  }
  // Offsets of position t of sequence b, KV head kvh, in qkv's k and v parts.
  std::int64_t k_at(int b, int t, int kvh) const {
    return (static_cast<std::int64_t>(b) * T + t) * C3 + C + static_cast<std::int64_t>(kvh) * HS;
  }
  std::int64_t v_at(int b, int t, int kvh) const { return k_at(b, t, kvh) + KVC; }
};

// One head's (T, HS) rows of qkv, dout or out, strided by ld, copied to contiguous rows.
// The tile GEMMs read them as B: rows 3 KiB apart (qkv's stride at C = 256) fall in 16 of
// L1's 64 sets, so a key block of them did not stay in L1 (tile_gemm at 64 x 64 x 256: 157
// GFLOP/s from qkv in place, 184 from a copy).
void copy_head(float* dst, const float* src, std::int64_t ld, int T, int HS) {
  for (int t = 0; t < T; ++t) {
    std::copy_n(src + t * ld, HS, dst + static_cast<std::int64_t>(t) * HS);
  }
}

// Buffers of one thread, allocated once per call and thread (not per tile): two score tiles;
// one head's K^T and V^T packed as tile_gemm's B operand (the score GEMMs' B); its K, V, Q and
// dout rows copied contiguous (copy_head). Each is filled once per head rather than per tile;
// head_of names the (b, KV head) they hold, -1 none. The forward uses kt and v only.
struct Tiles {
  std::vector<float> a, b, kt, vt, k, v, q, dout;
  std::int64_t head_of = -1;
  float m[kQueryBlock], l[kQueryBlock], alpha[kQueryBlock];
  Tiles(const Shape& g, bool backward)
      : a(kQueryBlock * kTileLd),
        b(backward ? kQueryBlock * kTileLd : 0),
        kt(static_cast<std::size_t>(packed_transposed_floats(g.T, g.HS))),
        vt(backward ? kt.size() : 0),
        k(backward ? head_floats(g) : 0),
        v(head_floats(g)),
        q(backward ? head_floats(g) : 0),
        dout(backward ? head_floats(g) : 0) {}
  static std::size_t head_floats(const Shape& g) {
    return static_cast<std::size_t>(g.T) * static_cast<std::size_t>(g.HS);
  }
};

int round_up_lanes(int n) { return (n + 15) / 16 * 16; }

// (rows, cols) scaled scores of a query block against the key block starting at key j0, into
// the tile s: alpha q x^T, `packed` holding the head's keys (or values) packed from key 0.
// Columns past the causal diagonal (ahead = i0 - j0) are not computed.
void score_tile(float* s, const float* q, std::int64_t ldq, const float* packed, const Shape& g,
                int rows, int cols, int j0, int ahead, float alpha) {
  TileGemm t;
  t.c = s;
  t.ldc = kTileLd;
  t.M = rows;
  t.N = round_up_lanes(cols);  // <= kKeyBlock; the packing's zero rows fill the last chunk
  t.K = g.HS;
  t.a = q;
  t.a_row = ldq;
  t.a_k = 1;
  t.b = packed + static_cast<std::int64_t>(j0 / TileGemm::kChunk) * TileGemm::kChunk * g.HS;
  t.ldb = TileGemm::kChunk;
  t.b_chunk = static_cast<std::int64_t>(TileGemm::kChunk) * g.HS;
  t.alpha = alpha;
  t.n_hi = ahead;
  tile_gemm(t, isa_of(g.level));
}

// c (m, HS) (+)= a b with b's rows (HS floats, stride ldb) read in place; a's element (i, k)
// at a[i * a_row + k * a_k]; k_lo, k_hi as TileGemm's causal limits.
void head_rows_gemm(float* c, std::int64_t ldc, int m, int k, const float* a,
                    std::int64_t a_row, std::int64_t a_k, const float* b, std::int64_t ldb,
                    bool accumulate, int k_lo, int k_hi, const Shape& g) {
  TileGemm t;
  t.c = c;
  t.ldc = ldc;
  t.M = m;
  t.N = g.HS;
  t.K = k;
  t.a = a;
  t.a_row = a_row;
  t.a_k = a_k;
  t.b = b;
  t.ldb = ldb;
  t.accumulate = accumulate;
  t.k_lo = k_lo;
  t.k_hi = k_hi;
  tile_gemm(t, isa_of(g.level));
}

void forward_block(float* out, float* lse, const float* qkv, const Shape& g, int b, int h,
                   int qb, Tiles& w) {
  const int i0 = qb * kQueryBlock;
  const int rows = g.rows_from(i0);
  const int end = i0 + rows;  // keys [0, end) are visible to some row of the block
  const float* q = qkv + g.qkv_at(b, i0, h);
  float* o = out + g.act_at(b, i0, h);
  float* s = w.a.data();
  const int kvh = g.kv_head(h);
  const std::int64_t bkv = static_cast<std::int64_t>(b) * g.KVH + kvh;
  if (w.head_of != bkv) {  // the thread's previous task read another KV head
    pack_transposed_chunks(w.kt.data(), qkv + g.k_at(b, 0, kvh), g.C3, g.T, g.HS,
                           isa_of(g.level));
    copy_head(w.v.data(), qkv + g.v_at(b, 0, kvh), g.C3, g.T, g.HS);
    w.head_of = bkv;
  }
  std::fill(w.m, w.m + rows, -INFINITY);
  std::fill(w.l, w.l + rows, 0.0f);
  for (int j0 = 0; j0 < end; j0 += kKeyBlock) {
    const int cols = std::min(kKeyBlock, end - j0);
    const int ahead = i0 - j0;
    const float* v = w.v.data() + static_cast<std::int64_t>(j0) * g.HS;
    // s = scale q k^T: (rows, cols)
    score_tile(s, q, g.C3, w.kt.data(), g, rows, cols, j0, ahead, g.scale);
    softmax_step(g.level, s, rows, cols, ahead, w.m, w.l, w.alpha);
    // o = alpha o + p v: the first block overwrites (o may hold anything); row r's
    // probabilities past its diagonal are 0, so its sum stops there.
    if (j0 > 0) scale_rows(g.level, o, g.C, rows, g.HS, w.alpha);
    head_rows_gemm(o, g.C, rows, cols, s, kTileLd, 1, v, g.HS, j0 > 0, TileGemm::kNoLimit, ahead,
                   g);
  }
  float* lse_rows = lse + (static_cast<std::int64_t>(b) * g.NH + h) * g.T + i0;
  for (int r = 0; r < rows; ++r) {
    w.alpha[r] = 1.0f / w.l[r];
    lse_rows[r] = w.m[r] + std::log(w.l[r]);
  }
  scale_rows(g.level, o, g.C, rows, g.HS, w.alpha);
}

// FlashAttention-2's backward for one (b, h), tile by tile: query blocks outer, key blocks
// inner, so dq of a block is finished before the next and dk, dv accumulate in a fixed order.
// K and V of h's KV head are already in w (packed by the caller, once per KV head); dk and dv
// of that KV head ACCUMULATE, so a group's query heads run one after another on one thread.
void backward_head(float* dqkv, float* D, const float* dout, const float* qkv, const float* out,
                   const float* lse, const Shape& g, int b, int h, Tiles& w) {
  const std::int64_t ld = g.C3;
  const std::int64_t bh = static_cast<std::int64_t>(b) * g.NH + h;
  const int kvh = g.kv_head(h);
  row_dots(g.level, D, dout + g.act_at(b, 0, h), out + g.act_at(b, 0, h), g.T, g.HS, g.C);
  copy_head(w.q.data(), qkv + g.qkv_at(b, 0, h), ld, g.T, g.HS);
  copy_head(w.dout.data(), dout + g.act_at(b, 0, h), g.C, g.T, g.HS);
  const std::int64_t hs = g.HS;
  float* p = w.a.data();
  float* ds = w.b.data();
  for (int qb = 0; qb < g.blocks; ++qb) {
    const int i0 = qb * kQueryBlock;
    const int rows = g.rows_from(i0);
    const int end = i0 + rows;
    const float* q = w.q.data() + i0 * hs;
    float* dq = dqkv + g.qkv_at(b, i0, h);
    const float* dO = w.dout.data() + i0 * hs;
    const float* lse_rows = lse + bh * g.T + i0;
    for (int j0 = 0; j0 < end; j0 += kKeyBlock) {
      const int cols = std::min(kKeyBlock, end - j0);
      const int ahead = i0 - j0;
      const float* k = w.k.data() + j0 * hs;
      float* dk = dqkv + g.k_at(b, j0, kvh);
      float* dv = dk + g.KVC;
      constexpr int kAll = TileGemm::kNoLimit;
      // p = exp(scale q k^T - lse): (rows, cols), the forward's probabilities again.
      score_tile(p, q, hs, w.kt.data(), g, rows, cols, j0, ahead, g.scale);
      probs(g.level, p, rows, cols, ahead, lse_rows);
      // dv += p^T dout: (cols, HS); key c meets queries r >= c - ahead only.
      head_rows_gemm(dv, ld, cols, rows, p, 1, kTileLd, dO, hs, true, ahead, kAll, g);
      // dp = dout v^T: (rows, cols); then ds = scale p (dp - D)
      score_tile(ds, dO, hs, w.vt.data(), g, rows, cols, j0, ahead, 1.0f);
      dscores(g.level, ds, p, rows, cols, ahead, D + i0, g.scale);
      // dq += ds k: (rows, HS); dk += ds^T q: (cols, HS)
      head_rows_gemm(dq, ld, rows, cols, ds, kTileLd, 1, k, hs, true, kAll, ahead, g);
      head_rows_gemm(dk, ld, cols, rows, ds, 1, kTileLd, q, hs, true, ahead, kAll, g);
    }
  }
}

// The backward of every query head reading KV head kvh of sequence b, in head order (dk and
// dv sum over the group in that fixed order).
void backward_kv_head(float* dqkv, float* scratch, const float* dout, const float* qkv,
                      const float* out, const float* lse, const Shape& g, int b, int kvh,
                      Tiles& w) {
  const Isa isa = isa_of(g.level);
  pack_transposed_chunks(w.kt.data(), qkv + g.k_at(b, 0, kvh), g.C3, g.T, g.HS, isa);
  pack_transposed_chunks(w.vt.data(), qkv + g.v_at(b, 0, kvh), g.C3, g.T, g.HS, isa);
  copy_head(w.k.data(), qkv + g.k_at(b, 0, kvh), g.C3, g.T, g.HS);
  const int group = g.NH / g.KVH;
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    float* D = scratch + (static_cast<std::int64_t>(b) * g.NH + h) * g.T;
    backward_head(dqkv, D, dout, qkv, out, lse, g, b, h, w);
  }
}

}  // namespace

void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                             int NH) {
  flash_attention_forward(out, lse, qkv, B, T, C, NH, NH);
}

void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                             int NH, int KVH, Isa isa) {
  constexpr const char* kName = "flash_attention_forward";
  detail::require_tensors(kName, {{"out", out}, {"lse", lse}, {"qkv", qkv}});
  check_shapes(kName, B, T, C, NH, KVH);
  const Shape g(B, T, C, NH, KVH, isa_level_for(isa, kName));
  const std::int64_t tasks = static_cast<std::int64_t>(B) * NH * g.blocks;
  const double flops = 2.0 * B * NH * static_cast<double>(T) * T * g.HS;  // causal forward
  const int threads = threads_for(flops, tasks);
#pragma omp parallel num_threads(threads)
  {
    Tiles w(g, /*backward=*/false);
    // Dynamic: the causal triangle makes a late query block qb + 1 times the work of the
    // first; tasks run latest block first so the long ones start early. Which thread runs a
    // task does not change its result.
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t task = 0; task < tasks; ++task) {
      const int qb = g.blocks - 1 - static_cast<int>(task % g.blocks);
      const int bh = static_cast<int>(task / g.blocks);
      forward_block(out, lse, qkv, g, bh / NH, bh % NH, qb, w);
    }
  }
}

std::int64_t flash_attention_backward_scratch_floats(int B, int T, int NH) {
  return static_cast<std::int64_t>(B) * NH * T;
}

void flash_attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                              const float* out, const float* lse, int B, int T, int C, int NH) {
  flash_attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NH);
}

void flash_attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                              const float* out, const float* lse, int B, int T, int C, int NH,
                              int KVH, Isa isa) {
  constexpr const char* kName = "flash_attention_backward";
  detail::require_tensors(kName, {{"dqkv", dqkv}, {"scratch", scratch}, {"dout", dout},
                                  {"qkv", qkv}, {"out", out}, {"lse", lse}});
  check_shapes(kName, B, T, C, NH, KVH);
  const Shape g(B, T, C, NH, KVH, isa_level_for(isa, kName));
  // A task is a (b, KV head): it owns that head's dk and dv, so a group's query heads never
  // add into them from two threads.
  const int tasks = B * KVH;
  const double flops = 5.0 * B * NH * static_cast<double>(T) * T * g.HS;  // five causal GEMMs
  const int threads = threads_for(flops, tasks);
#pragma omp parallel num_threads(threads)
  {
    Tiles w(g, /*backward=*/true);
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < tasks; ++task) {
      backward_kv_head(dqkv, scratch, dout, qkv, out, lse, g, task / KVH, task % KVH, w);
    }
  }
}

}  // namespace strata::kernels::cpu
