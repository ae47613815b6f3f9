// What the LayerNorm and RMSNorm kernels share (layernorm.cu, rmsnorm.cu): the launch shapes,
// the residual add fused at the head of a forward row, the fixed-order block sums of the
// backward, and the reduction of the backward's per-block partials in a fixed order. Each
// keeps the arithmetic order the kernels had on their own, so results are bit-identical.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/scratch_sizes.h"

namespace strata::kernels::cuda::norm {

inline constexpr int kForwardWarps = 8;       // rows per forward block
inline constexpr int kBackwardThreads = 256;  // threads per row-group backward block
inline constexpr int kReduceCols = 32;        // partial reduction: columns per block (a lane each)
inline constexpr int kReduceRows = 8;         // ... and row groups, combined in y order

// Backward blocks, each owning a partial (scratch_sizes.h sizes the scratch from the same
// count: every SM of an H100 busy).
inline int backward_blocks(int BT) { return layernorm_backward_blocks(BT); }

// The row a one-warp-per-row forward normalises: inp1's, or, with inp2 non-null, residual's,
// written first as bf16(inp1 + inp2) (normalised as rounded: what the backward will read).
// residual may alias inp1 or inp2: each element is read, then written, by one lane; the warp
// syncs because the caller's sums read other lanes' elements.
__device__ __forceinline__ const bf16* residual_row(bf16* residual, const bf16* inp1,
                                                    const bf16* inp2, std::int64_t base, int C,
                                                    int lane) {
  if (inp2 == nullptr) return inp1 + base;
  for (int c = lane; c < C; c += device::kWarpSize) {
    residual[base + c] =
        device::to_bf16(device::to_f32(inp1[base + c]) + device::to_f32(inp2[base + c]));
  }
  __syncwarp();
  return residual + base;
}

// Sums each of v[0..kN) over the block (kBackwardThreads threads) in a fixed order: warps'
// sums added in warp order. Every thread gets the totals.
template <int kN>
__device__ __forceinline__ void block_sums(float (&v)[kN]) {
  constexpr int kWarps = kBackwardThreads / device::kWarpSize;
  __shared__ float per_warp[kN][kWarps];
  const int warp = threadIdx.x / device::kWarpSize;
  float mine[kN];
#pragma unroll
  for (int k = 0; k < kN; ++k) mine[k] = device::warp_sum(v[k]);
  __syncthreads();  // the previous call's readers are done with per_warp
  if (threadIdx.x % device::kWarpSize == 0) {
#pragma unroll
    for (int k = 0; k < kN; ++k) per_warp[k][warp] = mine[k];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    v[k] = 0.0f;
    for (int w = 0; w < kWarps; ++w) v[k] += per_warp[k][w];
  }
}

// grad_k[c] += the sum over blocks of partial[b][k][c] (partial: (blocks, kParts, C)), k <
// kParts (LayerNorm: dweight then dbias; RMSNorm: dweight). Thread (x, y) sums blocks y,
// y + kReduceRows, ... of column x, then the kReduceRows sums are added in y order (a fixed
// order: the same bits every run).
template <int kParts>
__global__ void reduce_partials_kernel(float* __restrict__ grad0, float* __restrict__ grad1,
                                       const float* __restrict__ partial, int blocks, int C) {
  __shared__ float sums[kParts][kReduceRows][kReduceCols + 1];
  const int c = blockIdx.x * kReduceCols + threadIdx.x;
  float acc[kParts];
#pragma unroll
  for (int k = 0; k < kParts; ++k) acc[k] = 0.0f;
  if (c < C) {
    for (int b = threadIdx.y; b < blocks; b += kReduceRows) {
      const std::int64_t at = static_cast<std::int64_t>(b) * kParts * C + c;
#pragma unroll
      for (int k = 0; k < kParts; ++k) acc[k] += partial[at + static_cast<std::int64_t>(k) * C];
    }
  }
#pragma unroll
  for (int k = 0; k < kParts; ++k) sums[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float* grads[2] = {grad0, grad1};
#pragma unroll
  for (int k = 0; k < kParts; ++k) {
    float total = 0.0f;
    for (int y = 0; y < kReduceRows; ++y) total += sums[k][y][threadIdx.x];
    grads[k][c] += total;
  }
}

// Launches the reduction above over `blocks` partials of C columns (grad1 unused when
// kParts is 1).
template <int kParts>
void reduce_partials(float* grad0, float* grad1, const float* partial, int blocks, int C,
                     cudaStream_t stream) {
  static_assert(kParts == 1 || kParts == 2, "dweight, and dbias for LayerNorm");
  const dim3 block(kReduceCols, kReduceRows);
  const dim3 grid(static_cast<unsigned>(device::ceil_div(C, kReduceCols)));
  reduce_partials_kernel<kParts><<<grid, block, 0, stream>>>(grad0, grad1, partial, blocks, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::kernels::cuda::norm
