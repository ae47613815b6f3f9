// The GPU twin of kernels/cpu/normal_init.h: counter-based normal draws straight into device
// memory, for a tensor laid out by rows whose elements map to a global tensor's indices as
// cost_model/specs/param_layout.h's ParamSegment::global_index says (a TP shard of it). It computes
// kernels/counter_normal.h's estimate and keeps it where that is provably the float the
// formula gives; the indices of the rest (about 1 in 1,000) are handed back for the host to
// fill with the exact formula (executor/cuda/seeded_init.h does both halves).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/common.h"

namespace strata::kernels::cuda {

// Local element e = r * cols + c of a row-major (rows, cols) shard; rows >= valid_rows are
// padding (zero). Its global index: (r / part_rows * part_stride + row_offset +
// r % part_rows) * global_cols + col_offset + c (ParamSegment::global_index's mapping; the
// GPU test holds the two together).
struct NormalRows {
  std::uint64_t key = 0;
  double scale = 1.0;
  std::int64_t cols = 1, valid_rows = 0;
  std::int64_t part_rows = 1, part_stride = 0, row_offset = 0, col_offset = 0, global_cols = 1;
};

// For local elements e in [first, first + n): dst[e - first] = float(scale * normal(key,
// global(e))) or 0 in padding rows, except where the estimate cannot decide: those get NaN
// and their e - first is appended to undecided[0 .. capacity) (*undecided_count counts them
// all, so a count over capacity means some were not recorded). *undecided_count must be
// zero before the launch. On `stream`, asynchronous.
void normal_fill_rows(float* dst, const NormalRows& rows, std::int64_t first, std::int64_t n,
                      std::int64_t* undecided, unsigned long long* undecided_count,
                      std::int64_t capacity, cudaStream_t stream);

// dst[index[i]] = values[i] for i in [0, n). On `stream`.
void scatter_values(float* dst, const std::int64_t* index, const float* values, std::int64_t n,
                    cudaStream_t stream);

}  // namespace strata::kernels::cuda
