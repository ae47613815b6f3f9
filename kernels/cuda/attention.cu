// Causal attention on tensor cores, FlashAttention-2 style (see attention.h).
//
// Every matrix product is mma.sync.m16n8k16 (bf16 in, fp32 accumulate) on fragments loaded
// from shared memory with ldmatrix; it runs on sm_80 and sm_90 alike (no wgmma / TMA).
// Tiles: 4 warps per block, each warp owns 16 rows of the block's 64-row tile; the streamed
// tiles (keys in forward and dQ, queries in dK/dV) are double-buffered with cp.async.
//
//   forward  block = 128 (HS = 64) or 64 (HS = 128) query rows of one (b, h), 32 or 16 per
//            warp; key tiles of 64 up to the diagonal. S = Q K^T (Q fragments in registers), online softmax in registers in the
//            log2 domain (x = s * scale * log2 e, p = 2^(x - m)), P re-packed from the
//            accumulator layout into A fragments, O += P V. lse = m ln 2 + ln l.
//   rowsum   D[b, h, t] = sum_d dout * out (fp32, into the caller's scratch).
//   dK/dV    block = 64 key rows of a KV head; query tiles from the diagonal to T, of each
//            query head of the KV head's group in turn (grouped-query attention). The warp computes the
//            transposed products directly: S^T = K Q^T, P^T = 2^(S^T scale log2e - lse log2e),
//            dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - D), dK += dS^T Q.
//   dQ       block = 64 query rows; key tiles up to the diagonal: S = Q K^T, P, dP = dO V^T,
//            dS = P (dP - D), dQ += dS K.
// dK/dV and dQ both recompute P (the forward's exponentials twice) in exchange for no atomics:
// each gradient element has one owning thread and a fixed summation order, so the backward
// is bit-reproducible. Gradients are added onto dqkv as bf16(float(dqkv) + grad), or written
// as bf16(grad) in overwrite mode.
// Masks: keys after the query, and rows/columns >= T (tiles are zero-filled past T). Only
// tiles that touch the diagonal or the end of the sequence evaluate the mask.
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_shapes.h"

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * device::kWarpSize;
constexpr int kRows = 16 * kWarps;  // rows of the block's own tile (queries or keys)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Addressing of the packed tensors (elements). qkv rows are [q (NH) | k (KVH) | v (KVH)]
// heads of HS: 3 C wide without grouping (KVH = NH).
struct Layout {
  int T, C, NH, HS, KVH;
  __host__ __device__ std::int64_t stride() const {
    return C + 2 * static_cast<std::int64_t>(KVH) * HS;
  }
  __device__ int kv_head(int h) const { return h / (NH / KVH); }
  __device__ std::int64_t row(int b, int t) const { return static_cast<std::int64_t>(b) * T + t; }
  __device__ std::int64_t q(int b, int t, int h) const { return row(b, t) * stride() + h * HS; }
  __device__ std::int64_t k(int b, int t, int g) const {
    return row(b, t) * stride() + C + static_cast<std::int64_t>(g) * HS;
  }
  __device__ std::int64_t v(int b, int t, int g) const {
    return k(b, t, g) + static_cast<std::int64_t>(KVH) * HS;
  }
  __device__ std::int64_t o(int b, int t, int h) const { return row(b, t) * C + h * HS; }
  __device__ std::int64_t stat(int b, int h, int t) const {
    return (static_cast<std::int64_t>(b) * NH + h) * T + t;
  }
};

// ---------------------------------------------------------------------------------------
// PTX wrappers

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; zero-filled when !valid (src must still be a mapped address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
               "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 address the rows of matrix i. Register i of lane l
// holds row l/4, columns 2(l%4), 2(l%4)+1 of matrix i (transposed with .trans).
__device__ __forceinline__ void ldsm_x4(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// d (16x8 fp32) += a (16x16 bf16, row) * b (16x8 bf16, col).
__device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                    std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats -> bf16x2 register, `lo` in the low half (the lower column index).
__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<std::uint32_t*>(&v);
}

// ---------------------------------------------------------------------------------------
// Fragment addressing in a row-major shared tile with `kStride` elements per row.
// Fragment layouts of m16n8k16 (g = lane / 4, c = lane % 4):
//   A 16x16: a0 = A[g][2c..], a1 = A[g+8][2c..], a2 = A[g][2c+8..], a3 = A[g+8][2c+8..]
//   B 16x8:  b0 = B[2c..][g], b1 = B[2c+8..][g]
//   C 16x8:  c0,c1 = C[g][2c, 2c+1], c2,c3 = C[g+8][2c, 2c+1]

// A fragment of the 16x16 block at (row0, col0) of a row-major tile; also the address for
// ldmatrix.trans of B = tile^T-free [k][n] storage: 16 k-rows x 16 n-columns at (row0, col0)
// giving (b0, b1) of n-tile col0 in r0, r1 and of n-tile col0 + 8 in r2, r3.
template <int kStride>
__device__ __forceinline__ std::uint32_t frag_a(const bf16* tile, int row0, int col0, int lane) {
  return smem_addr(tile + (row0 + (lane & 15)) * kStride + col0 + (lane >> 4) * 8);
}

// B fragments (non-transposed ldmatrix) when B[k][n] = tile[n][k] (tile rows are the n index):
// n rows n0..n0+15, k columns k0..k0+15 -> (b0, b1) of n-tile n0 in r0, r1, of n0 + 8 in r2, r3.
template <int kStride>
__device__ __forceinline__ std::uint32_t frag_b_rows(const bf16* tile, int n0, int k0, int lane) {
  return smem_addr(tile + (n0 + (lane & 7) + (lane >> 4) * 8) * kStride + k0 +
                   ((lane >> 3) & 1) * 8);
}

// Copies rows [first, first + kTileRows) of one head (HS contiguous bf16 per row, rows
// `row_stride` apart) into a padded shared tile; rows >= T are zero-filled.
template <int HS, int kTileRows>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* head, std::int64_t row_stride,
                                          int first, int T) {
  constexpr int kChunks = HS / 8;  // 16-byte chunks per row
  constexpr int kStride = HS + 8;
  for (int e = threadIdx.x; e < kTileRows * kChunks; e += kThreads) {
    const int r = e / kChunks, ch = e % kChunks;
    const int t = first + r;
    const bf16* src = head + static_cast<std::int64_t>(t < T ? t : 0) * row_stride + ch * 8;
    cp_async16(tile + r * kStride + ch * 8, src, t < T);
  }
}

// Every kernel streams tiles through two shared-memory buffers: step `step` computes on buffer
// step & 1 while the loads of step + 1 (load(step + 1, buffer)) fill the other. Starts those
// loads, waits for this step's and syncs the block; returns this step's buffer. The caller
// syncs again after its compute, before the next step's loads refill the buffer.
template <class Load>
__device__ __forceinline__ int begin_stream_step(int step, int steps, Load&& load) {
  const int st = step & 1;
  if (step + 1 < steps) {
    load(step + 1, st ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
  return st;
}

// acc (16 rows x kCols, kCols / 8 n-tiles) = rows [row0, row0 + 16) of `own` times the
// streamed tile's kCols rows, transposed, over HS dims: S^T = K Q^T and dP^T = V dO^T, the
// own tile's A fragments loaded per k-step.
template <int HS, int kStride, int kNTiles>
__device__ __forceinline__ void mma_rows_by_tile_rows(float (&acc)[kNTiles][4], const bf16* own,
                                                      int row0, const bf16* tile, int lane) {
  for (int i = 0; i < kNTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
    std::uint32_t a[4];
    ldsm_x4(a, frag_a<kStride>(own, row0, kk * 16, lane));
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      std::uint32_t bt[4];
      ldsm_x4(bt, frag_b_rows<kStride>(tile, np * 16, kk * 16, lane));
      mma(acc[2 * np], a, bt[0], bt[1]);
      mma(acc[2 * np + 1], a, bt[2], bt[3]);
    }
  }
}

// acc (16 x HS) += P (16 x kCols, in the accumulator layout of kCols / 8 n-tiles) times the
// tile's kCols rows of HS dims: P's two adjacent n-tiles re-packed as the A fragment of one
// 16-column k-step, the tile ([row][dim]) read by ldmatrix.trans. dV += P^T dO,
// dK += dS^T Q, dQ += dS K.
template <int HS, int kStride, int kNTiles>
__device__ __forceinline__ void mma_p_by_tile(float (&acc)[HS / 8][4], const float (&p)[kNTiles][4],
                                              const bf16* tile, int lane) {
#pragma unroll
  for (int kk = 0; kk < kNTiles / 2; ++kk) {
    const std::uint32_t pa[4] = {
        pack_bf16(p[2 * kk][0], p[2 * kk][1]), pack_bf16(p[2 * kk][2], p[2 * kk][3]),
        pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
        pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int np = 0; np < HS / 16; ++np) {
      std::uint32_t bt[4];
      ldsm_x4_trans(bt, frag_a<kStride>(tile, kk * 16, np * 16, lane));
      mma(acc[2 * np], pa, bt[0], bt[1]);
      mma(acc[2 * np + 1], pa, bt[2], bt[3]);
    }
  }
}

// 2^x on the SFU, flushing denormal results to zero (p below 2^-126 is noise against l >= 1).
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Quad (4 lanes sharing a row) reductions.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(device::kFullMask, x, 1));
  return fmaxf(x, __shfl_xor_sync(device::kFullMask, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(device::kFullMask, x, 1);
  return x + __shfl_xor_sync(device::kFullMask, x, 2);
}

// dst (bf16x2 at row, col) = bf16(float(dst) + (lo, hi) * mul), or bf16((lo, hi) * mul)
// when !accumulate (a fresh gradient buffer: no read, and no zeroing pass before).
__device__ __forceinline__ void accumulate_pair(bf16* dst, float lo, float hi, float mul,
                                                bool accumulate) {
  __nv_bfloat162* p = reinterpret_cast<__nv_bfloat162*>(dst);
  const float2 old = accumulate ? __bfloat1622float2(*p) : make_float2(0.0f, 0.0f);
  *p = __floats2bfloat162_rn(old.x + lo * mul, old.y + hi * mul);
}

// ---------------------------------------------------------------------------------------
// Shared-memory budgets (bytes) of each kernel; all need the > 48 KB opt-in at HS = 128.

template <int HS>
struct FwdConfig {
  static constexpr int kStride = HS + 8;  // +16 B per row: ldmatrix rows hit distinct banks
  static constexpr int kKeys = 64;        // keys per streamed tile
  // m-tiles (16 rows) per warp: two at HS = 64, so each K / V fragment feeds two mma (half
  // the ldmatrix traffic per mma); one at HS = 128, where O alone is 64 registers per tile.
  static constexpr int kMTiles = HS == 64 ? 2 : 1;
  static constexpr int kBlockRows = 16 * kWarps * kMTiles;
  static constexpr int kTileElems = kKeys * kStride;
  static constexpr int kSmemBytes = (kBlockRows + 4 * kKeys) * kStride * 2;  // Q, K x2, V x2
};

template <int HS>
struct BwdConfig {
  static constexpr int kStride = HS + 8;
  // Streamed tile rows: 64 at HS = 64; 32 at HS = 128 so that dK, dV (or dQ), S and dP
  // accumulators fit the 255-register budget.
  static constexpr int kCols = HS == 64 ? 64 : 32;
  static constexpr int kOwnElems = kRows * kStride;
  static constexpr int kStreamElems = kCols * kStride;
  // Two own tiles, two streamed tensors double-buffered, plus lse and D (dK/dV only).
  static constexpr int kSmemBytes = (2 * kOwnElems + 4 * kStreamElems) * 2 + 4 * kCols * 4;
};

// ---------------------------------------------------------------------------------------
// Kernels. Grid: (NH, B, row tiles), (KVH, B, key tiles) for dK/dV; the tile index is in z
// so that the heavy tiles (long causal loops) of every head are scheduled first.

template <int HS>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(bf16* __restrict__ out, float* __restrict__ lse,
                             const bf16* __restrict__ qkv, Layout L) {
  using Cfg = FwdConfig<HS>;
  constexpr int kStride = Cfg::kStride;
  constexpr int kKeys = Cfg::kKeys;
  constexpr int kMT = Cfg::kMTiles;
  constexpr int kBlockRows = Cfg::kBlockRows;
  constexpr int kKSteps = HS / 16;  // k-steps of Q K^T over the head dims
  constexpr int kOTiles = HS / 8;   // n-tiles of O
  constexpr int kSTiles = kKeys / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);  // [kBlockRows][kStride]
  bf16* ks = qs + kBlockRows * kStride;       // [2][kKeys][kStride]
  bf16* vs = ks + 2 * Cfg::kTileElems;        // [2][kKeys][kStride]

  const int h = blockIdx.x, b = blockIdx.y;
  const int q0 = (gridDim.z - 1 - blockIdx.z) * kBlockRows;  // late rows loop longest: first
  const int warp = threadIdx.x / device::kWarpSize, lane = threadIdx.x % device::kWarpSize;
  const int g = lane >> 2, c = lane & 3;
  const int T = L.T;
  const std::int64_t stride = L.stride();
  const bf16* q_head = qkv + L.q(b, 0, h);
  const bf16* k_head = qkv + L.k(b, 0, L.kv_head(h));
  const bf16* v_head = qkv + L.v(b, 0, L.kv_head(h));
  const float sl2 = rsqrtf(static_cast<float>(HS)) * kLog2e;

  // Key tile j (K and V) into buffer `buf`.
  const auto load_kv = [&](int j, int buf) {
    load_tile<HS, kKeys>(ks + buf * Cfg::kTileElems, k_head, stride, j * kKeys, T);
    load_tile<HS, kKeys>(vs + buf * Cfg::kTileElems, v_head, stride, j * kKeys, T);
  };
  load_tile<HS, kBlockRows>(qs, q_head, stride, q0, T);
  load_kv(0, 0);
  cp_async_commit();

  // Key tiles covering keys 0 .. min(q0 + kBlockRows, T) - 1: all this block's rows see.
  const int n_tiles = static_cast<int>(device::ceil_div(min(q0 + kBlockRows, T), kKeys));
  const int warp_row0 = warp * 16 * kMT;  // the warp's rows in the block: kMT m-tiles of 16
  std::uint32_t qf[kMT][kKSteps][4];
  float o[kMT][kOTiles][4];
  float m[kMT][2], l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    for (int i = 0; i < kOTiles; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }

  for (int j = 0; j < n_tiles; ++j) {
    const int st = begin_stream_step(j, n_tiles, load_kv);
    if (j == 0) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk)
          ldsm_x4(qf[mt][kk], frag_a<kStride>(qs, warp_row0 + mt * 16, kk * 16, lane));
    }
    const bf16* kt = ks + st * Cfg::kTileElems;
    const bf16* vt = vs + st * Cfg::kTileElems;

    // S = Q K^T: 16 kMT rows x 64 keys per warp; each K fragment serves all kMT m-tiles.
    float s[kMT][kSTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
      for (int i = 0; i < kSTiles; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
      for (int np = 0; np < kSTiles / 2; ++np) {
        std::uint32_t bk[4];
        ldsm_x4(bk, frag_b_rows<kStride>(kt, np * 16, kk * 16, lane));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma(s[mt][2 * np], qf[mt][kk], bk[0], bk[1]);
          mma(s[mt][2 * np + 1], qf[mt][kk], bk[2], bk[3]);
        }
      }
    }

    // Mask keys after the row and keys >= T (raw scores; the scale is applied in the exp).
    const int k0 = j * kKeys;
    const bool masked_tile = k0 + kKeys > q0 || k0 + kKeys > T;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const int row_lo = q0 + warp_row0 + mt * 16 + g;  // rows row_lo, row_lo + 8
      if (masked_tile) {
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = k0 + nt * 8 + 2 * c + (e & 1);
            const int row = row_lo + (e >> 1) * 8;
            if (key > row || key >= T) s[mt][nt][e] = -INFINITY;
          }
        }
      }

      // Online softmax in the log2 domain: m = max(s) * scale * log2 e (the scale is
      // positive, so the max commutes with it), p = 2^(s * scale log2e - m) in one FFMA.
      // Key 0 (tile 0) is visible to every row, so m is finite from the first tile on;
      // 2^(-inf) = 0 for masked keys and for the first correction.
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
        mx0 = fmaxf(mx0, fmaxf(s[mt][nt][0], s[mt][nt][1]));
        mx1 = fmaxf(mx1, fmaxf(s[mt][nt][2], s[mt][nt][3]));
      }
      mx0 = fmaxf(m[mt][0], quad_max(mx0) * sl2);
      mx1 = fmaxf(m[mt][1], quad_max(mx1) * sl2);
      const float corr0 = exp2_ftz(m[mt][0] - mx0), corr1 = exp2_ftz(m[mt][1] - mx1);
      m[mt][0] = mx0;
      m[mt][1] = mx1;
      // Per-thread partial sums; the quad reduces them once at the end.
      float l0 = l[mt][0] * corr0, l1 = l[mt][1] * corr1;
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
        s[mt][nt][0] = exp2_ftz(fmaf(s[mt][nt][0], sl2, -mx0));
        s[mt][nt][1] = exp2_ftz(fmaf(s[mt][nt][1], sl2, -mx0));
        s[mt][nt][2] = exp2_ftz(fmaf(s[mt][nt][2], sl2, -mx1));
        s[mt][nt][3] = exp2_ftz(fmaf(s[mt][nt][3], sl2, -mx1));
        l0 += s[mt][nt][0] + s[mt][nt][1];
        l1 += s[mt][nt][2] + s[mt][nt][3];
      }
      l[mt][0] = l0;
      l[mt][1] = l1;
#pragma unroll
      for (int nt = 0; nt < kOTiles; ++nt) {
        o[mt][nt][0] *= corr0;
        o[mt][nt][1] *= corr0;
        o[mt][nt][2] *= corr1;
        o[mt][nt][3] *= corr1;
      }
    }

    // O += P V: P's accumulator layout over two adjacent n-tiles is the A layout of one
    // 16-key k-step; V is [key][dim] so B comes from ldmatrix.trans.
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      std::uint32_t pa[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        pa[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int np = 0; np < HS / 16; ++np) {
        std::uint32_t bv[4];
        ldsm_x4_trans(bv, frag_a<kStride>(vt, kk * 16, np * 16, lane));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma(o[mt][2 * np], pa[mt], bv[0], bv[1]);
          mma(o[mt][2 * np + 1], pa[mt], bv[2], bv[3]);
        }
      }
    }
    __syncthreads();  // buffer st is refilled by the next iteration's prefetch
  }

#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = q0 + warp_row0 + mt * 16 + g + r * 8;
      const float sum = quad_sum(l[mt][r]);  // all lanes take part in the shuffles
      if (row >= T) continue;
      const float inv_l = 1.0f / sum;
      bf16* dst = out + L.o(b, row, h) + 2 * c;
#pragma unroll
      for (int nt = 0; nt < kOTiles; ++nt) {
        *reinterpret_cast<__nv_bfloat162*>(dst + nt * 8) =
            __floats2bfloat162_rn(o[mt][nt][2 * r] * inv_l, o[mt][nt][2 * r + 1] * inv_l);
      }
      if (c == 0) lse[L.stat(b, h, row)] = m[mt][r] * kLn2 + logf(sum);
    }
  }
}

// D[b, h, t] = sum_d dout * out over the head's HS dims; one warp per (b, t, h) row.
constexpr int kRowsumWarps = 8;
template <int HS>
__global__ void __launch_bounds__(kRowsumWarps * device::kWarpSize)
    attention_rowsum_kernel(float* __restrict__ D, const bf16* __restrict__ dout,
                            const bf16* __restrict__ out, Layout L, int B) {
  const int lane = threadIdx.x % device::kWarpSize;
  const std::int64_t r =
      static_cast<std::int64_t>(blockIdx.x) * kRowsumWarps + threadIdx.x / device::kWarpSize;
  if (r >= static_cast<std::int64_t>(B) * L.T * L.NH) return;
  const int h = static_cast<int>(r % L.NH);
  const int t = static_cast<int>((r / L.NH) % L.T);
  const int b = static_cast<int>(r / (static_cast<std::int64_t>(L.NH) * L.T));
  const std::int64_t o = L.o(b, t, h);
  float sum = 0.0f;
  for (int d = 2 * lane; d < HS; d += 2 * device::kWarpSize) {
    const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(dout + o + d));
    const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(out + o + d));
    sum += x.x * y.x + x.y * y.y;
  }
  sum = device::warp_sum(sum);
  if (lane == 0) D[L.stat(b, h, t)] = sum;
}

template <int HS>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(bf16* __restrict__ dqkv, const bf16* __restrict__ dout,
                          const bf16* __restrict__ qkv, const float* __restrict__ lse,
                          const float* __restrict__ D, Layout L, bool accumulate) {
  using Cfg = BwdConfig<HS>;
  constexpr int kStride = Cfg::kStride;
  constexpr int kQ = Cfg::kCols;     // queries per streamed tile
  constexpr int kDTiles = HS / 8;    // n-tiles of dK, dV
  constexpr int kSTiles = kQ / 8;    // n-tiles of S^T (queries)
  extern __shared__ __align__(16) unsigned char smem[];
  float* lse_s = reinterpret_cast<float*>(smem);  // [2][kQ], pre-multiplied by log2 e
  float* d_s = lse_s + 2 * kQ;                    // [2][kQ]
  bf16* ks = reinterpret_cast<bf16*>(d_s + 2 * kQ);
  bf16* vs = ks + Cfg::kOwnElems;
  bf16* qs = vs + Cfg::kOwnElems;         // [2][kQ][kStride]
  bf16* dos = qs + 2 * Cfg::kStreamElems;  // [2][kQ][kStride]

  const int kvh = blockIdx.x, b = blockIdx.y;  // a KV head: its group's query heads stream by
  const int k_tile = blockIdx.z;  // low key tiles see the most queries: scheduled first
  const int k0 = k_tile * kRows;
  const int warp = threadIdx.x / device::kWarpSize, lane = threadIdx.x % device::kWarpSize;
  const int g = lane >> 2, c = lane & 3;
  const int T = L.T;
  const std::int64_t stride = L.stride();
  const int group = L.NH / L.KVH;
  const float scale = rsqrtf(static_cast<float>(HS));
  const float sl2 = scale * kLog2e;

  const int qt_first = k0 / kQ;  // queries before k0 see none of this block's keys
  const int n_qt = static_cast<int>(device::ceil_div(T, kQ));
  // Streamed steps: the query tiles qt_first .. n_qt - 1 of each of the group's query heads
  // in head order, so dK and dV sum the group in a fixed order (one head without grouping).
  const int per_head = n_qt - qt_first;
  const int steps = group * per_head;
  auto load_stream = [&](int step, int buf) {
    const int h = kvh * group + step / per_head;
    const int q_first = (qt_first + step % per_head) * kQ;
    const bf16* q_head = qkv + L.q(b, 0, h);
    const bf16* do_head = dout + L.o(b, 0, h);
    const float* lse_head = lse + L.stat(b, h, 0);
    const float* d_head = D + L.stat(b, h, 0);
    load_tile<HS, kQ>(qs + buf * Cfg::kStreamElems, q_head, stride, q_first, T);
    load_tile<HS, kQ>(dos + buf * Cfg::kStreamElems, do_head, L.C, q_first, T);
    for (int i = threadIdx.x; i < kQ; i += kThreads) {
      const int t = q_first + i;
      lse_s[buf * kQ + i] = t < T ? lse_head[t] * kLog2e : 0.0f;
      d_s[buf * kQ + i] = t < T ? d_head[t] : 0.0f;
    }
  };

  load_tile<HS, kRows>(ks, qkv + L.k(b, 0, kvh), stride, k0, T);
  load_tile<HS, kRows>(vs, qkv + L.v(b, 0, kvh), stride, k0, T);
  load_stream(0, 0);
  cp_async_commit();

  const int key_lo = k0 + warp * 16 + g;  // this thread's keys: key_lo, key_lo + 8
  float dk[kDTiles][4], dv[kDTiles][4];
  for (int i = 0; i < kDTiles; ++i) {
    dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = 0.0f;
    dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.0f;
  }

  for (int step = 0; step < steps; ++step) {
    const int st = begin_stream_step(step, steps, load_stream);
    const int q0 = (qt_first + step % per_head) * kQ;
    // Skip (warp-uniformly) a tile whose queries all precede this warp's keys.
    if (q0 + kQ - 1 >= k0 + warp * 16) {
      const bf16* qt_s = qs + st * Cfg::kStreamElems;
      const bf16* dot_s = dos + st * Cfg::kStreamElems;
      const float* lse_t = lse_s + st * kQ;
      const float* d_t = d_s + st * kQ;

      // S^T = K Q^T: 16 keys x kQ queries.
      float s[kSTiles][4];
      mma_rows_by_tile_rows<HS, kStride>(s, ks, warp * 16, qt_s, lane);
      // P^T = 2^(S^T scale log2e - lse log2e); zero where query < key or query >= T.
      const bool masked_tile = q0 < k0 + kRows || q0 + kQ > T;
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = nt * 8 + 2 * c + (e & 1);
          float p = exp2_ftz(s[nt][e] * sl2 - lse_t[col]);
          if (masked_tile) {
            const int query = q0 + col;
            const int key = key_lo + (e >> 1) * 8;
            if (query < key || query >= T) p = 0.0f;
          }
          s[nt][e] = p;
        }
      }
      // dV += P^T dO: k-steps over queries.
      mma_p_by_tile<HS, kStride>(dv, s, dot_s, lane);
      // dP^T = V dO^T: 16 keys x kQ queries.
      float dp[kSTiles][4];
      mma_rows_by_tile_rows<HS, kStride>(dp, vs, warp * 16, dot_s, lane);
      // dS^T = P^T (dP^T - D[query]).
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[nt][e] = s[nt][e] * (dp[nt][e] - d_t[nt * 8 + 2 * c + (e & 1)]);
      }
      // dK += dS^T Q.
      mma_p_by_tile<HS, kStride>(dk, dp, qt_s, lane);
    }
    __syncthreads();  // buffer st is refilled by the next iteration's prefetch
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key_lo + r * 8;
    if (key >= T) continue;
    bf16* dk_row = dqkv + L.k(b, key, kvh) + 2 * c;
    bf16* dv_row = dqkv + L.v(b, key, kvh) + 2 * c;
#pragma unroll
    for (int nt = 0; nt < kDTiles; ++nt) {
      accumulate_pair(dk_row + nt * 8, dk[nt][2 * r], dk[nt][2 * r + 1], scale, accumulate);
      accumulate_pair(dv_row + nt * 8, dv[nt][2 * r], dv[nt][2 * r + 1], 1.0f, accumulate);
    }
  }
}

template <int HS>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(bf16* __restrict__ dqkv, const bf16* __restrict__ dout,
                        const bf16* __restrict__ qkv, const float* __restrict__ lse,
                        const float* __restrict__ D, Layout L, bool accumulate) {
  using Cfg = BwdConfig<HS>;
  constexpr int kStride = Cfg::kStride;
  constexpr int kK = Cfg::kCols;    // keys per streamed tile
  constexpr int kKSteps = HS / 16;
  constexpr int kDTiles = HS / 8;
  constexpr int kSTiles = kK / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* dos = qs + Cfg::kOwnElems;
  bf16* ks = dos + Cfg::kOwnElems;         // [2][kK][kStride]
  bf16* vs = ks + 2 * Cfg::kStreamElems;   // [2][kK][kStride]

  const int h = blockIdx.x, b = blockIdx.y;
  const int q_tile = gridDim.z - 1 - blockIdx.z;  // late query tiles loop longest: first
  const int q0 = q_tile * kRows;
  const int warp = threadIdx.x / device::kWarpSize, lane = threadIdx.x % device::kWarpSize;
  const int g = lane >> 2, c = lane & 3;
  const int T = L.T;
  const std::int64_t stride = L.stride();
  const bf16* q_head = qkv + L.q(b, 0, h);
  const bf16* k_head = qkv + L.k(b, 0, L.kv_head(h));
  const bf16* v_head = qkv + L.v(b, 0, L.kv_head(h));
  const float scale = rsqrtf(static_cast<float>(HS));
  const float sl2 = scale * kLog2e;

  const int row_lo = q0 + warp * 16 + g;  // this thread's rows: row_lo, row_lo + 8
  float lse_r[2], d_r[2];
  for (int r = 0; r < 2; ++r) {
    const int row = row_lo + r * 8;
    lse_r[r] = row < T ? lse[L.stat(b, h, row)] * kLog2e : 0.0f;
    d_r[r] = row < T ? D[L.stat(b, h, row)] : 0.0f;
  }

  // Key tile j (K and V) into buffer `buf`.
  const auto load_kv = [&](int j, int buf) {
    load_tile<HS, kK>(ks + buf * Cfg::kStreamElems, k_head, stride, j * kK, T);
    load_tile<HS, kK>(vs + buf * Cfg::kStreamElems, v_head, stride, j * kK, T);
  };
  load_tile<HS, kRows>(qs, q_head, stride, q0, T);
  load_tile<HS, kRows>(dos, dout + L.o(b, 0, h), L.C, q0, T);
  load_kv(0, 0);
  cp_async_commit();

  // Key tiles covering keys 0 .. min(q0 + 63, T - 1).
  const int n_kt = static_cast<int>(device::ceil_div(min(q0 + kRows, T), kK));
  std::uint32_t qf[kKSteps][4], dof[kKSteps][4];
  float dq[kDTiles][4];
  for (int i = 0; i < kDTiles; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;

  for (int j = 0; j < n_kt; ++j) {
    const int st = begin_stream_step(j, n_kt, load_kv);
    if (j == 0) {
      for (int kk = 0; kk < kKSteps; ++kk) {
        ldsm_x4(qf[kk], frag_a<kStride>(qs, warp * 16, kk * 16, lane));
        ldsm_x4(dof[kk], frag_a<kStride>(dos, warp * 16, kk * 16, lane));
      }
    }
    const int k0 = j * kK;
    // Skip (warp-uniformly) a tile whose keys all follow this warp's last row.
    if (k0 <= q0 + warp * 16 + 15) {
      const bf16* kt = ks + st * Cfg::kStreamElems;
      const bf16* vt = vs + st * Cfg::kStreamElems;
      float s[kSTiles][4], dp[kSTiles][4];
      for (int i = 0; i < kSTiles; ++i) {
        s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
        dp[i][0] = dp[i][1] = dp[i][2] = dp[i][3] = 0.0f;
      }
      // S = Q K^T and dP = dO V^T: 16 rows x kK keys.
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
        for (int np = 0; np < kSTiles / 2; ++np) {
          std::uint32_t bk[4], bv[4];
          ldsm_x4(bk, frag_b_rows<kStride>(kt, np * 16, kk * 16, lane));
          mma(s[2 * np], qf[kk], bk[0], bk[1]);
          mma(s[2 * np + 1], qf[kk], bk[2], bk[3]);
          ldsm_x4(bv, frag_b_rows<kStride>(vt, np * 16, kk * 16, lane));
          mma(dp[2 * np], dof[kk], bv[0], bv[1]);
          mma(dp[2 * np + 1], dof[kk], bv[2], bv[3]);
        }
      }
      // dS = P (dP - D), P = 2^(S scale log2e - lse log2e), zero for key > row or key >= T.
      const bool masked_tile = k0 + kK > q0 || k0 + kK > T;
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1;
          float p = exp2_ftz(s[nt][e] * sl2 - lse_r[r]);
          if (masked_tile) {
            const int key = k0 + nt * 8 + 2 * c + (e & 1);
            if (key > row_lo + r * 8 || key >= T) p = 0.0f;
          }
          dp[nt][e] = p * (dp[nt][e] - d_r[r]);
        }
      }
      // dQ += dS K.
      mma_p_by_tile<HS, kStride>(dq, dp, kt, lane);
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_lo + r * 8;
    if (row >= T) continue;
    bf16* dq_row = dqkv + L.q(b, row, h) + 2 * c;
#pragma unroll
    for (int nt = 0; nt < kDTiles; ++nt)
      accumulate_pair(dq_row + nt * 8, dq[nt][2 * r], dq[nt][2 * r + 1], scale, accumulate);
  }
}

// ---------------------------------------------------------------------------------------
// Launchers

// cp.async moves 16-byte chunks and the epilogues bf16x2 pairs.
void require_aligned(const char* kernel, const char* name, const void* p) {
  if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) {
    throw KernelError(fmt::format("{}: {} = {}; expected a 16-byte aligned address", kernel,
                                  name, p));
  }
}

dim3 tile_grid(int B, int T, int NH) {
  return dim3(static_cast<unsigned>(NH), static_cast<unsigned>(B),
              static_cast<unsigned>(device::ceil_div(T, kRows)));
}

template <class Kernel>
void set_smem(Kernel kernel, int bytes) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <int HS>
void launch_forward(bf16* out, float* lse, const bf16* qkv, int B, const Layout& L,
                    cudaStream_t stream) {
  constexpr int kBytes = FwdConfig<HS>::kSmemBytes;
  set_smem(attention_forward_kernel<HS>, kBytes);
  const dim3 grid(static_cast<unsigned>(L.NH), static_cast<unsigned>(B),
                  static_cast<unsigned>(device::ceil_div(L.T, FwdConfig<HS>::kBlockRows)));
  attention_forward_kernel<HS><<<grid, kThreads, kBytes, stream>>>(out, lse, qkv, L);
  CUDA_CHECK_LAUNCH();
}

template <int HS>
void launch_backward(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv,
                     const bf16* out, const float* lse, int B, const Layout& L,
                     bool accumulate, cudaStream_t stream) {
  constexpr int kBytes = BwdConfig<HS>::kSmemBytes;
  const int rowsum_grid = static_cast<int>(
      device::ceil_div(static_cast<std::int64_t>(B) * L.T * L.NH, kRowsumWarps));
  attention_rowsum_kernel<HS><<<rowsum_grid, kRowsumWarps * device::kWarpSize, 0, stream>>>(
      scratch, dout, out, L, B);
  CUDA_CHECK_LAUNCH();
  const dim3 grid = tile_grid(B, L.T, L.NH);
  set_smem(attention_dkdv_kernel<HS>, kBytes);
  attention_dkdv_kernel<HS><<<tile_grid(B, L.T, L.KVH), kThreads, kBytes, stream>>>(
      dqkv, dout, qkv, lse, scratch, L, accumulate);
  CUDA_CHECK_LAUNCH();
  set_smem(attention_dq_kernel<HS>, kBytes);
  attention_dq_kernel<HS><<<grid, kThreads, kBytes, stream>>>(dqkv, dout, qkv, lse, scratch, L,
                                                               accumulate);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                       cudaStream_t stream) {
  attention_forward(out, lse, qkv, B, T, C, NH, NH, stream);
}

void attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                       int KVH, cudaStream_t stream) {
  constexpr const char* kName = "attention_forward";
  cpu::detail::require_tensors(kName, {{"out", out}, {"lse", lse}, {"qkv", qkv}});
  check_attention_shapes(kName, B, T, C, NH, KVH);
  require_aligned(kName, "qkv", qkv);
  require_aligned(kName, "out", out);
  const Layout L{T, C, NH, C / NH, KVH};
  if (L.HS == 64) {
    launch_forward<64>(out, lse, qkv, B, L, stream);
  } else {
    launch_forward<128>(out, lse, qkv, B, L, stream);
  }
}

void attention_backward(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv,
                        const bf16* out, const float* lse, int B, int T, int C, int NH,
                        cudaStream_t stream, bool overwrite) {
  attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NH, stream, overwrite);
}

void attention_backward(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv,
                        const bf16* out, const float* lse, int B, int T, int C, int NH, int KVH,
                        cudaStream_t stream, bool overwrite) {
  constexpr const char* kName = "attention_backward";
  cpu::detail::require_tensors(kName, {{"dqkv", dqkv}, {"scratch", scratch}, {"dout", dout},
                                       {"qkv", qkv}, {"out", out}, {"lse", lse}});
  check_attention_shapes(kName, B, T, C, NH, KVH);
  require_aligned(kName, "dqkv", dqkv);
  require_aligned(kName, "dout", dout);
  require_aligned(kName, "qkv", qkv);
  require_aligned(kName, "out", out);
  const Layout L{T, C, NH, C / NH, KVH};
  if (L.HS == 64) {
    launch_backward<64>(dqkv, scratch, dout, qkv, out, lse, B, L, !overwrite, stream);
  } else {
    launch_backward<128>(dqkv, scratch, dout, qkv, out, lse, B, L, !overwrite, stream);
  }
}

}  // namespace strata::kernels::cuda
