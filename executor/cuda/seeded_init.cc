// Seeded initial values on the GPU (see seeded_init.h).
#include "executor/cuda/seeded_init.h"

#include <algorithm>
#include <vector>

#include "executor/model/param_init.h"
#include "kernels/cpu/normal_init.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/normal_init.h"

namespace strata::cuda {
namespace kc = kernels::cuda;

namespace {

// Room for the undecided elements of n drawn: the estimate declines ~1 in 1,000, so n / 256
// is four times that; a segment that somehow needs more is drawn on the host instead.
std::int64_t undecided_capacity(std::int64_t n) { return n / 256 + 1024; }

kc::NormalRows rows_of(const ParamSegment& s, std::uint64_t seed) {
  kc::NormalRows rows;
  rows.key = model::tensor_key(seed, s.code, s.layer);
  rows.scale = s.init_std;
  rows.cols = s.cols;
  rows.valid_rows = s.valid_rows;
  rows.part_rows = s.part_rows;
  rows.part_stride = s.part_stride;
  rows.row_offset = s.row_offset;
  rows.col_offset = s.col_offset;
  rows.global_cols = s.global_cols;
  return rows;
}

void copy_up(float* dst, const float* src, std::int64_t n, cudaStream_t stream) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(float),
                             cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));  // src is pageable host memory about to go
}

}  // namespace

void draw_seeded_on_device(float* dst, const UnitLayout& unit, std::uint64_t seed,
                           std::int64_t begin, std::int64_t end, cudaStream_t stream) {
  if (end <= begin) return;
  // Zero first: padding, zero-initialised tensors and padding rows need nothing more.
  CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<std::size_t>(end - begin) * sizeof(float), stream));
  std::int64_t largest = 0;
  for (const auto& s : unit.segments) {
    largest = std::max(largest, std::min(end, s.offset + s.count()) - std::max(begin, s.offset));
  }
  const std::int64_t capacity = undecided_capacity(largest);
  kc::DeviceBuffer undecided(static_cast<std::size_t>(capacity) * sizeof(std::int64_t));
  kc::DeviceBuffer exact(static_cast<std::size_t>(capacity) * sizeof(float));
  kc::DeviceBuffer count(sizeof(unsigned long long));
  std::vector<std::int64_t> index;
  std::vector<float> values;
  for (const auto& s : unit.segments) {
    const std::int64_t lo = std::max(begin, s.offset);
    const std::int64_t hi = std::min(end, s.offset + s.count());
    if (lo >= hi || s.init == InitKind::kZeros) continue;
    float* out = dst + (lo - begin);
    const std::int64_t n = hi - lo;
    if (s.init == InitKind::kOnes) {
      // Ones up to valid_rows (LayerNorm gains have no padding rows; the general case kept).
      std::vector<float> ones(static_cast<std::size_t>(n));
      model::init_unit_range(unit, seed, ones.data(), lo, hi);
      copy_up(out, ones.data(), n, stream);
      continue;
    }
    const kc::NormalRows rows = rows_of(s, seed);
    CUDA_CHECK(cudaMemsetAsync(count.get(), 0, sizeof(unsigned long long), stream));
    kc::normal_fill_rows(out, rows, lo - s.offset, n, undecided.as<std::int64_t>(),
                         count.as<unsigned long long>(), capacity, stream);
    unsigned long long undecided_n = 0;
    CUDA_CHECK(cudaMemcpyAsync(&undecided_n, count.get(), sizeof undecided_n,
                               cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (undecided_n == 0) continue;
    if (undecided_n > static_cast<unsigned long long>(capacity)) {  // not all recorded
      std::vector<float> host(static_cast<std::size_t>(n));
      model::init_unit_range(unit, seed, host.data(), lo, hi);
      copy_up(out, host.data(), n, stream);
      continue;
    }
    // The exact formula for each undecided element (its local element e = lo - offset + j).
    index.resize(undecided_n);
    values.resize(undecided_n);
    CUDA_CHECK(cudaMemcpyAsync(index.data(), undecided.get(), undecided_n * sizeof(std::int64_t),
                               cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    // ~1 in 1,000 of a segment (8M for an 8B model): on every thread.
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < index.size(); ++i) {
      const std::int64_t e = lo - s.offset + index[i];
      const std::int64_t r = e / s.cols, c = e % s.cols;
      values[i] = static_cast<float>(s.init_std *
                                     kernels::cpu::normal_exact(rows.key, s.global_index(r, c)));
    }
    // The indices are still on the device, in `undecided`: only the values go up.
    CUDA_CHECK(cudaMemcpyAsync(exact.get(), values.data(), values.size() * sizeof(float),
                               cudaMemcpyHostToDevice, stream));
    kc::scatter_values(out, undecided.as<std::int64_t>(), exact.as<float>(),
                       static_cast<std::int64_t>(values.size()), stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));  // `values` and the buffers are reused
  }
}

}  // namespace strata::cuda
