// OpenBLAS held at one thread for a scope (see blas_threads.h).
#include "kernels/cpu/blas_threads.h"

#include <cblas.h>

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

}  // namespace strata::kernels::cpu
