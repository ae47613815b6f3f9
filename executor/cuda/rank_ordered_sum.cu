// rank_ordered_sum: one thread per output element, a grid-stride loop, and the ranks' rows
// added strictly left to right (plain adds: there is no multiply for nvcc to contract into an
// FMA, so the order written is the order executed).
#include "executor/cuda/rank_ordered_sum.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {
namespace {

// ---- kernels ----

template <class T>
__global__ void rank_ordered_sum_kernel(const T* __restrict__ copies, T* __restrict__ out,
                                        std::int64_t m, int ranks) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m;
       i += stride) {
    T sum = copies[i];
    for (int r = 1; r < ranks; ++r) sum += copies[static_cast<std::int64_t>(r) * m + i];
    out[i] = sum;
  }
}

// ---- launchers ----

template <class T>
void launch(const T* copies, T* out, std::int64_t m, int ranks, cudaStream_t stream) {
  if (m == 0) return;
  constexpr int kThreads = 256;
  // Enough blocks to fill an H100 (132 SMs x 8 resident blocks) and no more: the loop strides.
  const std::int64_t wanted = (m + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(std::min<std::int64_t>(wanted, 132 * 8));
  rank_ordered_sum_kernel<T><<<blocks, kThreads, 0, stream>>>(copies, out, m, ranks);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rank_ordered_sum(const float* copies, float* out, std::int64_t m, int ranks,
                      cudaStream_t stream) {
  launch(copies, out, m, ranks, stream);
}

void rank_ordered_sum(const double* copies, double* out, std::int64_t m, int ranks,
                      cudaStream_t stream) {
  launch(copies, out, m, ranks, stream);
}

}  // namespace strata::cuda
