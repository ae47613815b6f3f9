// RMSNorm forward (optionally with the residual add fused in) and backward; see rmsnorm.h.
// Forward: one warp per row, a pass for the sum of squares and a pass to write. Backward: one
// block per group of rows, thread t owning columns t, t + 256, ...; each block writes one
// dweight partial, with no atomics, and a second kernel adds the partials in block order.
#include "kernels/cuda/rmsnorm.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kForwardWarps = 8;        // rows per forward block
constexpr int kBackwardThreads = 256;   // threads per backward block
constexpr int kReduceCols = 32;          // partial reduction: columns per block (one per lane)
constexpr int kReduceRows = 8;           // ... and row groups, combined in y order

// As layernorm.cu (scratch_sizes.h: every SM of an H100 busy), which sizes the scratch.
int backward_blocks(int BT) { return layernorm_backward_blocks(BT); }

// When inp2 is non-null, residual = bf16(inp1 + inp2) is written and normalised; otherwise
// inp1 is normalised and residual is unused.
__global__ void rmsnorm_forward_kernel(bf16* __restrict__ out, float* __restrict__ rstd,
                                       bf16* residual, const bf16* inp1, const bf16* inp2,
                                       const bf16* __restrict__ weight, int BT, int C,
                                       float eps) {
  const int lane = threadIdx.x % device::kWarpSize;
  const int row = blockIdx.x * kForwardWarps + threadIdx.x / device::kWarpSize;
  if (row >= BT) return;  // whole warp leaves together: no block-level sync below
  const std::int64_t base = static_cast<std::int64_t>(row) * C;
  const bf16* x = inp1 + base;
  if (inp2 != nullptr) {
    // residual may alias inp1 or inp2: each element is read, then written, by one lane.
    for (int c = lane; c < C; c += device::kWarpSize) {
      residual[base + c] = device::to_bf16(device::to_f32(inp1[base + c]) +
                                           device::to_f32(inp2[base + c]));
    }
    x = residual + base;
    __syncwarp();  // the sum below reads other lanes' elements
  }
  float sum_sq = 0.0f;
  for (int c = lane; c < C; c += device::kWarpSize) {
    const float v = device::to_f32(x[c]);
    sum_sq += v * v;
  }
  const float s = rsqrtf(device::warp_sum(sum_sq) / C + eps);
  for (int c = lane; c < C; c += device::kWarpSize) {
    out[base + c] = device::to_bf16(device::to_f32(x[c]) * s * device::to_f32(weight[c]));
  }
  if (lane == 0) rstd[row] = s;
}

// Sums a over the block (256 threads) in a fixed order; every thread gets the total.
__device__ float block_sum(float a) {
  __shared__ float warp_a[kBackwardThreads / device::kWarpSize];
  const int warp = threadIdx.x / device::kWarpSize;
  const float wa = device::warp_sum(a);
  __syncthreads();  // the previous call's readers are done with warp_a
  if (threadIdx.x % device::kWarpSize == 0) warp_a[warp] = wa;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kBackwardThreads / device::kWarpSize; ++w) total += warp_a[w];
  return total;
}

// Block `blk` handles rows blk, blk + gridDim.x, ...; partial: (gridDim.x, C) gets this
// block's dweight sums.
__global__ void rmsnorm_backward_kernel(bf16* __restrict__ dinp, float* __restrict__ partial,
                                        const bf16* __restrict__ dout,
                                        const bf16* __restrict__ inp,
                                        const bf16* __restrict__ weight,
                                        const float* __restrict__ rstd, int BT, int C) {
  float* dw_part = partial + static_cast<std::int64_t>(blockIdx.x) * C;
  for (int c = threadIdx.x; c < C; c += kBackwardThreads) dw_part[c] = 0.0f;
  for (int row = blockIdx.x; row < BT; row += gridDim.x) {
    const std::int64_t base = static_cast<std::int64_t>(row) * C;
    const float s = rstd[row];
    // dx = rstd * (g - xhat * mean_c(g * xhat)), g = dout * weight, xhat = x * rstd.
    float gx_sum = 0.0f;
    for (int c = threadIdx.x; c < C; c += kBackwardThreads) {
      const float g = device::to_f32(dout[base + c]) * device::to_f32(weight[c]);
      gx_sum += g * (device::to_f32(inp[base + c]) * s);
    }
    const float gx_mean = block_sum(gx_sum) / C;
    for (int c = threadIdx.x; c < C; c += kBackwardThreads) {
      const float dy = device::to_f32(dout[base + c]);
      const float xhat = device::to_f32(inp[base + c]) * s;
      const float dx = s * (dy * device::to_f32(weight[c]) - xhat * gx_mean);
      dinp[base + c] = device::to_bf16(device::to_f32(dinp[base + c]) + dx);
      dw_part[c] += dy * xhat;  // column c belongs to this thread alone
    }
  }
}

// dweight[c] += sum over blocks of the partials: thread (x, y) sums blocks y, y + 8, ... of
// column x, then the 8 sums are added in y order (a fixed order: the same bits every run).
__global__ void rmsnorm_reduce_partials_kernel(float* __restrict__ dweight,
                                               const float* __restrict__ partial, int blocks,
                                               int C) {
  __shared__ float sums[kReduceRows][kReduceCols + 1];
  const int c = blockIdx.x * kReduceCols + threadIdx.x;
  float dw = 0.0f;
  if (c < C) {
    for (int b = threadIdx.y; b < blocks; b += kReduceRows) {
      dw += partial[static_cast<std::int64_t>(b) * C + c];
    }
  }
  sums[threadIdx.y][threadIdx.x] = dw;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float total = 0.0f;
  for (int y = 0; y < kReduceRows; ++y) total += sums[y][threadIdx.x];
  dweight[c] += total;
}

void check_forward(const char* kName, const bf16* out, const float* rstd, const bf16* inp,
                   const bf16* weight, int BT, int C, float eps) {
  detail::require_tensor(kName, "out", out);
  detail::require_tensor(kName, "rstd", rstd);
  detail::require_tensor(kName, "inp", inp);
  detail::require_tensor(kName, "weight", weight);
  detail::require_positive(kName, "BT", BT);
  detail::require_positive(kName, "C", C);
  if (!(eps >= 0.0f)) {
    throw KernelError(fmt::format("{}: eps = {}; expected >= 0", kName, eps));
  }
}

void launch_forward(bf16* out, float* rstd, bf16* residual, const bf16* inp1, const bf16* inp2,
                    const bf16* weight, int BT, int C, float eps, cudaStream_t stream) {
  const int grid = static_cast<int>(device::ceil_div(BT, kForwardWarps));
  rmsnorm_forward_kernel<<<grid, kForwardWarps * device::kWarpSize, 0, stream>>>(
      out, rstd, residual, inp1, inp2, weight, BT, C, eps);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* weight, int BT, int C,
                     float eps, cudaStream_t stream) {
  check_forward("rmsnorm_forward", out, rstd, inp, weight, BT, C, eps);
  launch_forward(out, rstd, nullptr, inp, nullptr, weight, BT, C, eps, stream);
}

void fused_residual_rmsnorm_forward(bf16* residual, bf16* out, float* rstd, const bf16* inp1,
                                    const bf16* inp2, const bf16* weight, int BT, int C,
                                    float eps, cudaStream_t stream) {
  constexpr const char* kName = "fused_residual_rmsnorm_forward";
  detail::require_tensor(kName, "residual", residual);
  detail::require_tensor(kName, "inp2", inp2);
  check_forward(kName, out, rstd, inp1, weight, BT, C, eps);
  if (out == residual || out == inp1 || out == inp2) {
    throw KernelError(fmt::format("{}: out aliases residual or an input; expected its own "
                                  "buffer (other lanes still read them)",
                                  kName));
  }
  launch_forward(out, rstd, residual, inp1, inp2, weight, BT, C, eps, stream);
}


void rmsnorm_backward(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp,
                      const bf16* weight, const float* rstd, int BT, int C, float* scratch,
                      cudaStream_t stream) {
  constexpr const char* kName = "rmsnorm_backward";
  detail::require_tensor(kName, "dinp", dinp);
  detail::require_tensor(kName, "dweight", dweight);
  detail::require_tensor(kName, "dout", dout);
  detail::require_tensor(kName, "inp", inp);
  detail::require_tensor(kName, "weight", weight);
  detail::require_tensor(kName, "rstd", rstd);
  detail::require_tensor(kName, "scratch", scratch);
  detail::require_positive(kName, "BT", BT);
  detail::require_positive(kName, "C", C);
  const int blocks = backward_blocks(BT);
  rmsnorm_backward_kernel<<<blocks, kBackwardThreads, 0, stream>>>(dinp, scratch, dout, inp,
                                                                   weight, rstd, BT, C);
  CUDA_CHECK_LAUNCH();
  const dim3 reduce_block(kReduceCols, kReduceRows);
  const dim3 reduce_grid(static_cast<unsigned>(device::ceil_div(C, kReduceCols)));
  rmsnorm_reduce_partials_kernel<<<reduce_grid, reduce_block, 0, stream>>>(dweight, scratch,
                                                                          blocks, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::kernels::cuda
