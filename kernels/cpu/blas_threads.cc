// OpenBLAS held at one thread for a scope (see blas_threads.h).
#include "kernels/cpu/blas_threads.h"

#include <cblas.h>

#include <cstring>
#include <vector>

namespace strata::kernels::cpu {

SerialBlasScope::SerialBlasScope(int omp_threads) {
  if (omp_threads <= 1) return;
  const int current = openblas_get_num_threads();
  if (current <= 1) return;
  saved_ = current;
  openblas_set_num_threads(1);
}

SerialBlasScope::~SerialBlasScope() {
  if (saved_ > 1) openblas_set_num_threads(saved_);
}

bool blas_same_bits_at_any_thread_count() {
  constexpr int M = 128, N = 192, K = 64;
  std::vector<float> a(M * K), b(N * K), one(M * N), two(M * N);
  // Fixed, irregular values (no generator state to share).
  for (int i = 0; i < M * K; ++i) a[i] = static_cast<float>((i * 37 % 101) - 50) / 17.0f;
  for (int i = 0; i < N * K; ++i) b[i] = static_cast<float>((i * 53 % 89) - 44) / 13.0f;
  const int saved = openblas_get_num_threads();
  bool same = true;
  for (int t = 0; t < 4 && same; ++t) {
    const CBLAS_TRANSPOSE ta = (t & 1) ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE tb = (t & 2) ? CblasTrans : CblasNoTrans;
    const int lda = (t & 1) ? M : K, ldb = (t & 2) ? K : N;
    openblas_set_num_threads(1);
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                one.data(), N);
    openblas_set_num_threads(2);
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                two.data(), N);
    same = std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0;
  }
  openblas_set_num_threads(saved);
  return same;
}

}  // namespace strata::kernels::cpu
