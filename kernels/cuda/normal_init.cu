// Counter-based normal draws on the GPU (see normal_init.h and kernels/counter_normal.h).
#include "kernels/cuda/normal_init.h"

#include <algorithm>

#include "kernels/counter_normal.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 8192;

__global__ void normal_fill_rows_kernel(float* dst, NormalRows rows, std::int64_t first,
                                        std::int64_t n, std::int64_t* undecided,
                                        unsigned long long* undecided_count,
                                        std::int64_t capacity) {
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; j < n;
       j += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const std::int64_t e = first + j;
    const std::int64_t r = e / rows.cols;
    const std::int64_t c = e % rows.cols;
    if (r >= rows.valid_rows) {
      dst[j] = 0.0f;
      continue;
    }
    const std::int64_t global =
        (r / rows.part_rows * rows.part_stride + rows.row_offset + r % rows.part_rows) *
            rows.global_cols + rows.col_offset + c;
    // The pair that holds the element, whole, and the element's half of it (a thread an
    // element: the pair's other half may lie in another row or shard, and hashing twice
    // costs the GPU nothing beside the memory traffic).
    const auto counter = 2 * (static_cast<std::uint64_t>(global) / 2);
    const NormalPair pair = normal_pair_estimate(counter_bits(rows.key, counter),
                                                 counter_bits(rows.key, counter + 1), rows.scale);
    const double v = global % 2 == 0 ? pair.even : pair.odd;
    dst[j] = static_cast<float>(v);  // NaN where undecided
    if (v != v) {
      const unsigned long long slot = atomicAdd(undecided_count, 1ull);
      if (slot < static_cast<unsigned long long>(capacity)) undecided[slot] = j;
    }
  }
}

__global__ void scatter_values_kernel(float* dst, const std::int64_t* index, const float* values,
                                      std::int64_t n) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    dst[index[i]] = values[i];
  }
}

unsigned blocks_for(std::int64_t n) {
  return static_cast<unsigned>(std::min(device::ceil_div(n, kThreads), kMaxBlocks));
}

}  // namespace

void normal_fill_rows(float* dst, const NormalRows& rows, std::int64_t first, std::int64_t n,
                      std::int64_t* undecided, unsigned long long* undecided_count,
                      std::int64_t capacity, cudaStream_t stream) {
  detail::require_non_negative("normal_fill_rows", "n", n);
  detail::require_non_negative("normal_fill_rows", "first", first);
  detail::require_non_negative("normal_fill_rows", "capacity", capacity);
  detail::require_positive("normal_fill_rows", "cols", rows.cols);
  detail::require_positive("normal_fill_rows", "part_rows", rows.part_rows);
  if (n == 0) return;
  detail::require_tensor("normal_fill_rows", "dst", dst);
  detail::require_tensor("normal_fill_rows", "undecided_count", undecided_count);
  if (capacity > 0) detail::require_tensor("normal_fill_rows", "undecided", undecided);
  normal_fill_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dst, rows, first, n, undecided,
                                                                  undecided_count, capacity);
  CUDA_CHECK_LAUNCH();
}

void scatter_values(float* dst, const std::int64_t* index, const float* values, std::int64_t n,
                    cudaStream_t stream) {
  detail::require_non_negative("scatter_values", "n", n);
  if (n == 0) return;
  detail::require_tensor("scatter_values", "dst", dst);
  detail::require_tensor("scatter_values", "index", index);
  detail::require_tensor("scatter_values", "values", values);
  scatter_values_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dst, index, values, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::kernels::cuda
