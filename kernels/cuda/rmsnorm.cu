// RMSNorm forward (optionally with the residual add fused in) and backward; see rmsnorm.h.
// Forward: one warp per row, a pass for the sum of squares and a pass to write. Backward: one
// block per group of rows, thread t owning columns t, t + 256, ...; each block writes one
// dweight partial, with no atomics, and a second kernel adds the partials in block order.
// The launch shapes, the fused residual add and the reductions are LayerNorm's
// (norm_common.cuh).
#include "kernels/cuda/rmsnorm.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/norm_args.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/norm_common.cuh"

namespace strata::kernels::cuda {
namespace {

using norm::backward_blocks;
using norm::kBackwardThreads;
using norm::kForwardWarps;

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
  const bf16* x = norm::residual_row(residual, inp1, inp2, base, C, lane);
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
    float sums[1] = {gx_sum};
    norm::block_sums(sums);
    const float gx_mean = sums[0] / C;
    for (int c = threadIdx.x; c < C; c += kBackwardThreads) {
      const float dy = device::to_f32(dout[base + c]);
      const float xhat = device::to_f32(inp[base + c]) * s;
      const float dx = s * (dy * device::to_f32(weight[c]) - xhat * gx_mean);
      dinp[base + c] = device::to_bf16(device::to_f32(dinp[base + c]) + dx);
      dw_part[c] += dy * xhat;  // column c belongs to this thread alone
    }
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
  cpu::detail::check_rmsnorm_forward_args("rmsnorm_forward", out, rstd, inp, weight, BT, C, eps);
  launch_forward(out, rstd, nullptr, inp, nullptr, weight, BT, C, eps, stream);
}

void fused_residual_rmsnorm_forward(bf16* residual, bf16* out, float* rstd, const bf16* inp1,
                                    const bf16* inp2, const bf16* weight, int BT, int C,
                                    float eps, cudaStream_t stream) {
  constexpr const char* kName = "fused_residual_rmsnorm_forward";
  detail::require_tensor(kName, "residual", residual);
  detail::require_tensor(kName, "inp2", inp2);
  cpu::detail::check_rmsnorm_forward_args(kName, out, rstd, inp1, weight, BT, C, eps);
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
  cpu::detail::check_rmsnorm_backward_args(kName, dinp, dweight, dout, inp, weight, rstd, BT, C);
  detail::require_tensor(kName, "scratch", scratch);
  const int blocks = backward_blocks(BT);
  rmsnorm_backward_kernel<<<blocks, kBackwardThreads, 0, stream>>>(dinp, scratch, dout, inp,
                                                                   weight, rstd, BT, C);
  CUDA_CHECK_LAUNCH();
  norm::reduce_partials<1>(dweight, nullptr, scratch, blocks, C, stream);
}

}  // namespace strata::kernels::cuda
