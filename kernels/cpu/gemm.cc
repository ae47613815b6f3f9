// Linear layer and general sgemm over cblas_sgemm (see gemm.h).
#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/arg_checks.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/parallel.h"

namespace strata::kernels::cpu {
namespace {

CBLAS_TRANSPOSE to_cblas(Trans t) { return t == Trans::kYes ? CblasTrans : CblasNoTrans; }

// dbias[o] += sum over rows of dout[., o] for o in [o0, o1), in double, rows in order; the
// column loop vectorizes without reordering any sum, so the AVX-512 and baseline versions
// (isa.h) give the same bits.
constexpr int kBiasBlock = 64;
[[gnu::always_inline]] inline void bias_block_body(float* dbias, const float* dout, int BT,
                                                   int OC, int o0, int o1) {
  double sum[kBiasBlock] = {};
  const int n = o1 - o0;
  for (int i = 0; i < BT; ++i) {
    const float* row = dout + static_cast<std::int64_t>(i) * OC + o0;
#pragma omp simd
    for (int o = 0; o < n; ++o) sum[o] += row[o];
  }
  for (int o = 0; o < n; ++o) dbias[o0 + o] += static_cast<float>(sum[o]);
}
STRATA_TARGET_AVX512 void bias_block_avx512(float* dbias, const float* dout, int BT, int OC,
                                            int o0, int o1) {
  bias_block_body(dbias, dout, BT, OC, o0, o1);
}
void bias_block_baseline(float* dbias, const float* dout, int BT, int OC, int o0, int o1) {
  bias_block_body(dbias, dout, BT, OC, o0, o1);
}

}  // namespace

void sgemm(Trans trans_a, Trans trans_b, int M, int N, int K, float alpha, const float* a,
           int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  constexpr const char* kName = "sgemm";
  detail::require_positive(kName, "M", M);
  detail::require_positive(kName, "N", N);
  detail::require_positive(kName, "K", K);
  detail::require_tensor(kName, "a", a);
  detail::require_tensor(kName, "b", b);
  detail::require_tensor(kName, "c", c);
  // Row-major a is (M, K) untransposed or (K, M) transposed; its stride covers a row.
  const int a_cols = trans_a == Trans::kNo ? K : M;
  const int b_cols = trans_b == Trans::kNo ? N : K;
  if (lda < a_cols || ldb < b_cols || ldc < N) {
    throw KernelError(fmt::format(
        "sgemm: leading dimensions lda={} ldb={} ldc={}; expected >= {}, {}, {} (row lengths)",
        lda, ldb, ldc, a_cols, b_cols, N));
  }
  cblas_sgemm(CblasRowMajor, to_cblas(trans_a), to_cblas(trans_b), M, N, K, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int BT, int C, int OC) {
  constexpr const char* kName = "matmul_forward";
  detail::require_tensor(kName, "out", out);
  detail::require_tensor(kName, "inp", inp);
  detail::require_tensor(kName, "weight", weight);
  detail::require_positive(kName, "BT", BT);
  detail::require_positive(kName, "C", C);
  detail::require_positive(kName, "OC", OC);
  float beta = 0.0f;
  if (bias != nullptr) {
    // Seed every row with the bias, then let sgemm add the product on top (beta = 1).
#pragma omp parallel for schedule(static) \
    if (static_cast<std::int64_t>(BT) * OC >= kParallelMinElements)
    for (int i = 0; i < BT; ++i) {
      float* row = out + static_cast<std::int64_t>(i) * OC;
      for (int o = 0; o < OC; ++o) row[o] = bias[o];
    }
    beta = 1.0f;
  }
  // out (BT, OC) = inp (BT, C) @ weight (OC, C)^T
  sgemm(Trans::kNo, Trans::kYes, BT, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int BT, int C, int OC,
                     InputGrad dinp_mode) {
  constexpr const char* kName = "matmul_backward";
  detail::require_tensor(kName, "dout", dout);
  detail::require_positive(kName, "BT", BT);
  detail::require_positive(kName, "C", C);
  detail::require_positive(kName, "OC", OC);
  if (dinp != nullptr) {
    detail::require_tensor(kName, "weight", weight);
    // dinp (BT, C) (+)= dout (BT, OC) @ weight (OC, C); beta = 0 never reads dinp (BLAS
    // semantics), so NaN left in it by an earlier user does not leak in.
    const float beta = dinp_mode == InputGrad::kAccumulate ? 1.0f : 0.0f;
    sgemm(Trans::kNo, Trans::kNo, BT, C, OC, 1.0f, dout, OC, weight, C, beta, dinp, C);
  }
  if (dweight != nullptr) {
    detail::require_tensor(kName, "inp", inp);
    // dweight (OC, C) += dout^T (OC, BT) @ inp (BT, C)
    sgemm(Trans::kYes, Trans::kNo, OC, C, BT, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  }
  if (dbias != nullptr) {
    // Each block of output channels is owned by one thread and summed over rows in order
    // (contiguous reads within a row), so the result does not depend on the thread count.
    const auto block = use_avx512(Isa::kBest, kName) ? bias_block_avx512 : bias_block_baseline;
    const int blocks = (OC + kBiasBlock - 1) / kBiasBlock;
#pragma omp parallel for schedule(static) \
    if (static_cast<std::int64_t>(BT) * OC >= kParallelMinElements)
    for (int blk = 0; blk < blocks; ++blk) {
      const int o0 = blk * kBiasBlock;
      block(dbias, dout, BT, OC, o0, std::min(OC, o0 + kBiasBlock));
    }
  }
}

void set_blas_threads(int n) {
  detail::require_positive("set_blas_threads", "n", n);
  openblas_set_num_threads(n);
}

}  // namespace strata::kernels::cpu
