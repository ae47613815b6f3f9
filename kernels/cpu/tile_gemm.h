// The tiled attention's small GEMMs (flash_attention.cc): C (M, N) = alpha A B (+ C), with A read
// in place through two strides (row-major or transposed, no packing) and B's rows read in 64-column
// chunks (B's own rows, or a K^T packed once per head by pack_transposed_chunks). OpenBLAS packs
// both operands on every call, which was a fifth of the attention's time at these shapes (K = 64,
// tile-sized M and N); here nothing is packed per call.
//
// Causal limits let the diagonal tiles skip their masked half: for row i of C, k_lo / k_hi bound
// the k range to [i - k_lo, i + k_hi] and n_hi the columns to j <= i + n_hi. They are applied per
// group of rows and rounded to whole vectors, so they are promises by the caller, not masks: A (i,
// k) must be 0 outside row i's k range (products there may or may not be summed), and C (i, j) past
// i + n_hi is left unspecified.
//
// Deterministic: C (i, j) is one sum over k in increasing order (fused multiply-adds where the CPU
// has them), the same for any call split or thread count.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace strata::kernels::cpu {

struct TileGemm {
  static constexpr int kNoLimit = 1 << 30;
  static constexpr int kChunk = 64;  // B's columns come in chunks of this many

  float* c = nullptr;
  std::int64_t ldc = 0;
  int M = 0, N = 0, K = 0;
  // A (i, k) = a[i * a_row + k * a_k]: a_row = lda, a_k = 1 for row-major A; swapped for A^T.
  const float* a = nullptr;
  std::int64_t a_row = 0, a_k = 0;
  // B (k, j) = b[(j / kChunk) * b_chunk + k * ldb + j % kChunk]: b_chunk = kChunk for a row-major
  // B, kChunk * K for pack_transposed_chunks' layout.
  const float* b = nullptr;
  std::int64_t ldb = 0, b_chunk = kChunk;
  float alpha = 1.0f;
  bool accumulate = false;  // C += alpha A B; otherwise C = alpha A B (C's contents ignored)
  int k_lo = kNoLimit, k_hi = kNoLimit, n_hi = kNoLimit;
};

// Requires M, N, K >= 0 and non-null pointers where M * N > 0 (the caller's tiles). The
// version for isa (isa.h): the AVX-512 micro-kernel, the AVX2 one (the same bits: one fused
// multiply-add chain per element), or plain loops over the same sums without fused
// multiply-adds (other bits). Throws KernelError as isa_level_for does: a caller inside an
// OpenMP region resolves kBest first (flash_attention.cc) and passes the level it got.
void tile_gemm(const TileGemm& g, Isa isa = Isa::kBest);

// Packs the transpose of x (n rows of `cols` floats, row stride ldx) as B operand chunks: out[(j /
// 64) * 64 * cols + k * 64 + j % 64] = x (j, k), rows j in [n, round_up(n, 64)) zero. out holds
// packed_transposed_floats(n, cols) floats.
std::int64_t packed_transposed_floats(int n, int cols);
// isa: the AVX-512 version gathers 16 rows at once (the same values).
void pack_transposed_chunks(float* out, const float* x, std::int64_t ldx, int n, int cols,
                            Isa isa = Isa::kBest);

}  // namespace strata::kernels::cpu
