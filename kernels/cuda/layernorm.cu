// LayerNorm forward (optionally with the residual add fused in) and backward; see
// layernorm.h. Forward: one warp per row; with 16-byte aligned rows (C % 8 == 0) the row sits
// in the lanes' registers (read once, mean then variance from there); otherwise two passes
// over memory for mean then variance (numerically safer than E[x^2] - E[x]^2), a third to
// write. Backward: with aligned rows one warp per row, its dweight/dbias terms in per-warp
// shared-memory accumulators; otherwise one block per group of rows, thread t owning columns
// t, t + 256, .... Either way each block writes one partial, with no atomics, and a second
// kernel adds the partials in block order (norm_common.cuh, shared with RMSNorm).
#include "kernels/cuda/layernorm.h"

#include <cstdint>

#include <algorithm>

#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/norm_args.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/norm_common.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr float kEps = cpu::kLayerNormEps;
using norm::backward_blocks;
using norm::kBackwardThreads;
using norm::kForwardWarps;

// ---------------------------------------------------------------------------------------
// Kernels

// When inp2 is non-null, residual = bf16(inp1 + inp2) is written and normalised; otherwise
// inp1 is normalised and residual is unused.
__global__ void layernorm_forward_kernel(bf16* __restrict__ out, float* __restrict__ mean,
                                         float* __restrict__ rstd, bf16* residual,
                                         const bf16* inp1, const bf16* inp2,
                                         const bf16* __restrict__ weight,
                                         const bf16* __restrict__ bias, int BT, int C) {
  const int lane = threadIdx.x % device::kWarpSize;
  const int row = blockIdx.x * kForwardWarps + threadIdx.x / device::kWarpSize;
  if (row >= BT) return;  // whole warp leaves together: no block-level sync below
  const std::int64_t base = static_cast<std::int64_t>(row) * C;
  const bf16* x = norm::residual_row(residual, inp1, inp2, base, C, lane);
  float sum = 0.0f;
  for (int c = lane; c < C; c += device::kWarpSize) sum += device::to_f32(x[c]);
  const float m = device::warp_sum(sum) / C;
  float var = 0.0f;
  for (int c = lane; c < C; c += device::kWarpSize) {
    const float d = device::to_f32(x[c]) - m;
    var += d * d;
  }
  const float s = rsqrtf(device::warp_sum(var) / C + kEps);
  for (int c = lane; c < C; c += device::kWarpSize) {
    const float xhat = (device::to_f32(x[c]) - m) * s;
    out[base + c] = device::to_bf16(xhat * device::to_f32(weight[c]) + device::to_f32(bias[c]));
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// The same forward with 16-byte accesses, for C % 8 == 0 and 16-byte aligned tensors: one warp
// per row, lane l owns the column vectors l, l + 32, ... (kSlots of them), so the row is read
// once into registers and the mean, the variance and the output all come from there.
template <int kSlots>
__global__ void __launch_bounds__(kForwardWarps * device::kWarpSize)
    layernorm_forward_vector_kernel(bf16* __restrict__ out, float* __restrict__ mean,
                                    float* __restrict__ rstd, bf16* residual, const bf16* inp1,
                                    const bf16* inp2, const bf16* __restrict__ weight,
                                    const bf16* __restrict__ bias, int BT, int C) {
  constexpr int kV = device::kBf16PerVector;
  const int lane = threadIdx.x % device::kWarpSize;
  const int row = blockIdx.x * kForwardWarps + threadIdx.x / device::kWarpSize;
  if (row >= BT) return;
  const std::int64_t base = static_cast<std::int64_t>(row) * C;
  const int vectors = C / kV;
  float x[kSlots][kV];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int v = lane + k * device::kWarpSize;
    if (v >= vectors) continue;
    device::load8(inp1 + base + v * kV, x[k]);
    if (inp2 != nullptr) {
      // residual = bf16(inp1 + inp2), normalised as rounded (what the backward will read);
      // it may alias inp1 or inp2: this lane read the vector before writing it.
      float y[kV];
      device::load8(inp2 + base + v * kV, y);
#pragma unroll
      for (int e = 0; e < kV; ++e) x[k][e] = device::to_f32(device::to_bf16(x[k][e] + y[e]));
      device::store8(residual + base + v * kV, x[k]);
    }
#pragma unroll
    for (int e = 0; e < kV; ++e) sum += x[k][e];
  }
  const float m = device::warp_sum(sum) / C;
  float var = 0.0f;
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    if (lane + k * device::kWarpSize >= vectors) continue;
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      const float d = x[k][e] - m;
      var += d * d;
    }
  }
  const float s = rsqrtf(device::warp_sum(var) / C + kEps);
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int v = lane + k * device::kWarpSize;
    if (v >= vectors) continue;
    float w[kV], b[kV];
    device::load8(weight + v * kV, w);
    device::load8(bias + v * kV, b);
#pragma unroll
    for (int e = 0; e < kV; ++e) x[k][e] = (x[k][e] - m) * s * w[e] + b[e];
    device::store8(out + base + v * kV, x[k]);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// The vector kernels' register slots (16-byte vectors per lane) for C columns, or 0 when C
// is not a multiple of 8 or exceeds 32 * 8 * kMaxVectorSlots.
constexpr int kMaxVectorSlots = 16;
int vector_slots(int C) {
  if (C % device::kBf16PerVector != 0) return 0;
  return device::power_of_two_slots(
      device::ceil_div(C / device::kBf16PerVector, device::kWarpSize), kMaxVectorSlots);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Block `blk` handles rows blk, blk + gridDim.x, ...; partial: (gridDim.x, 2, C) gets this
// block's dweight (first C) and dbias (next C) sums.
__global__ void layernorm_backward_kernel(bf16* __restrict__ dinp, float* __restrict__ partial,
                                          const bf16* __restrict__ dout,
                                          const bf16* __restrict__ inp,
                                          const bf16* __restrict__ weight,
                                          const float* __restrict__ mean,
                                          const float* __restrict__ rstd, int BT, int C) {
  float* dw_part = partial + static_cast<std::int64_t>(blockIdx.x) * 2 * C;
  float* db_part = dw_part + C;
  for (int c = threadIdx.x; c < C; c += kBackwardThreads) {
    dw_part[c] = 0.0f;
    db_part[c] = 0.0f;
  }
  for (int row = blockIdx.x; row < BT; row += gridDim.x) {
    const std::int64_t base = static_cast<std::int64_t>(row) * C;
    const float m = mean[row];
    const float s = rstd[row];
    // dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)), g = dout * weight.
    float g_sum = 0.0f;
    float gx_sum = 0.0f;
    for (int c = threadIdx.x; c < C; c += kBackwardThreads) {
      const float g = device::to_f32(dout[base + c]) * device::to_f32(weight[c]);
      g_sum += g;
      gx_sum += g * ((device::to_f32(inp[base + c]) - m) * s);
    }
    float sums[2] = {g_sum, gx_sum};
    norm::block_sums(sums);
    const float g_mean = sums[0] / C;
    const float gx_mean = sums[1] / C;
    for (int c = threadIdx.x; c < C; c += kBackwardThreads) {
      const float dy = device::to_f32(dout[base + c]);
      const float xhat = (device::to_f32(inp[base + c]) - m) * s;
      const float g = dy * device::to_f32(weight[c]);
      const float dx = s * (g - g_mean - xhat * gx_mean);
      dinp[base + c] = device::to_bf16(device::to_f32(dinp[base + c]) + dx);
      dw_part[c] += dy * xhat;  // column c belongs to this thread alone
      db_part[c] += dy;
    }
  }
}

// The same backward with 16-byte accesses, for the shapes the vector forward takes: one warp
// per row (no block-wide syncs inside the row loop), lane l owning the column vectors l,
// l + 32, ..., which it keeps in registers between the row's two passes. Each warp adds its
// rows' dweight/dbias terms into its own shared-memory accumulators (column c = 8 v + e at
// [e][v]: conflict-free), and at the end the block adds its warps' accumulators in warp
// order into its partial. Every column is summed in an order fixed by the shapes alone.
constexpr int kBackwardWarps = 4;  // rows in flight per block
constexpr std::size_t kDefaultSmemBytes = 48 * 1024;  // dynamic shared memory without opt-in
constexpr int kBackwardWarpBlocksMax = 528;  // 4 x 132 SMs: every warp sees ~8 rows of 16384

std::size_t backward_warp_smem_bytes(int C) {
  return static_cast<std::size_t>(kBackwardWarps) * 2 * C * sizeof(float);
}

template <int kSlots>
__global__ void __launch_bounds__(kBackwardWarps * device::kWarpSize)
    layernorm_backward_warp_kernel(bf16* __restrict__ dinp, float* __restrict__ partial,
                                   const bf16* __restrict__ dout, const bf16* __restrict__ inp,
                                   const bf16* __restrict__ weight,
                                   const float* __restrict__ mean,
                                   const float* __restrict__ rstd, int BT, int C) {
  extern __shared__ float accumulators[];  // [warp][dweight, dbias][e][v]
  constexpr int kV = device::kBf16PerVector;
  const int lane = threadIdx.x % device::kWarpSize;
  const int warp = threadIdx.x / device::kWarpSize;
  const int vectors = C / kV;
  float* dw = accumulators + static_cast<std::int64_t>(warp) * 2 * C;
  float* db = dw + C;
  for (int c = lane; c < 2 * C; c += device::kWarpSize) dw[c] = 0.0f;  // this warp's own
  __syncwarp();  // other lanes of the warp add into what this lane zeroed
  for (int row = blockIdx.x * kBackwardWarps + warp; row < BT; row += gridDim.x * kBackwardWarps) {
    const std::int64_t base = static_cast<std::int64_t>(row) * C;
    const float m = mean[row];
    const float s = rstd[row];
    uint4 dy_raw[kSlots], x_raw[kSlots];
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int v = lane + k * device::kWarpSize;
      if (v >= vectors) continue;
      dy_raw[k] = *reinterpret_cast<const uint4*>(dout + base + v * kV);
      x_raw[k] = *reinterpret_cast<const uint4*>(inp + base + v * kV);
    }
    // dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)), g = dout * weight.
    float g_sum = 0.0f;
    float gx_sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int v = lane + k * device::kWarpSize;
      if (v >= vectors) continue;
      const bf16* dy = reinterpret_cast<const bf16*>(&dy_raw[k]);
      const bf16* x = reinterpret_cast<const bf16*>(&x_raw[k]);
      float w[kV];
      device::load8(weight + v * kV, w);
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        const float g = device::to_f32(dy[e]) * w[e];
        g_sum += g;
        gx_sum += g * ((device::to_f32(x[e]) - m) * s);
      }
    }
    const float g_mean = device::warp_sum(g_sum) / C;
    const float gx_mean = device::warp_sum(gx_sum) / C;
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int v = lane + k * device::kWarpSize;
      if (v >= vectors) continue;
      const bf16* dy = reinterpret_cast<const bf16*>(&dy_raw[k]);
      const bf16* x = reinterpret_cast<const bf16*>(&x_raw[k]);
      float w[kV], acc[kV];
      device::load8(weight + v * kV, w);
      device::load8(dinp + base + v * kV, acc);
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        const float d = device::to_f32(dy[e]);
        const float xhat = (device::to_f32(x[e]) - m) * s;
        acc[e] += s * (d * w[e] - g_mean - xhat * gx_mean);
        dw[e * vectors + v] += d * xhat;  // column 8 v + e belongs to this lane alone
        db[e * vectors + v] += d;
      }
      device::store8(dinp + base + v * kV, acc);
    }
  }
  __syncthreads();
  float* out = partial + static_cast<std::int64_t>(blockIdx.x) * 2 * C;
  for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) {
    const int half = i / C;  // 0: dweight, 1: dbias
    const int c = i % C;
    const int slot = half * C + (c % kV) * vectors + c / kV;
    float total = 0.0f;
    for (int w = 0; w < kBackwardWarps; ++w) total += accumulators[w * 2 * C + slot];
    out[i] = total;
  }
}

// ---------------------------------------------------------------------------------------
// Launchers

void launch_forward(bf16* out, float* mean, float* rstd, bf16* residual, const bf16* inp1,
                    const bf16* inp2, const bf16* weight, const bf16* bias, int BT, int C,
                    cudaStream_t stream) {
  const int grid = static_cast<int>(device::ceil_div(BT, kForwardWarps));
  const int slots = vector_slots(C);
  const bool vector_path = slots > 0 && aligned16(out) && aligned16(inp1) && aligned16(weight) &&
                           aligned16(bias) && (inp2 == nullptr || (aligned16(inp2) &&
                                                                   aligned16(residual)));
  if (vector_path) {
    device::with_slots<kMaxVectorSlots>(slots, [&](auto k) {
      layernorm_forward_vector_kernel<decltype(k)::value>
          <<<grid, kForwardWarps * device::kWarpSize, 0, stream>>>(out, mean, rstd, residual,
                                                                  inp1, inp2, weight, bias, BT, C);
    });
  } else {
    layernorm_forward_kernel<<<grid, kForwardWarps * device::kWarpSize, 0, stream>>>(
        out, mean, rstd, residual, inp1, inp2, weight, bias, BT, C);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp,
                       const bf16* weight, const bf16* bias, int BT, int C,
                       cudaStream_t stream) {
  cpu::detail::check_layernorm_forward_args("layernorm_forward", out, mean, rstd, inp, weight,
                                            bias, BT, C);
  launch_forward(out, mean, rstd, nullptr, inp, nullptr, weight, bias, BT, C, stream);
}

void fused_residual_layernorm_forward(bf16* residual, bf16* out, float* mean, float* rstd,
                                      const bf16* inp1, const bf16* inp2, const bf16* weight,
                                      const bf16* bias, int BT, int C, cudaStream_t stream) {
  constexpr const char* kName = "fused_residual_layernorm_forward";
  detail::require_tensor(kName, "residual", residual);
  detail::require_tensor(kName, "inp2", inp2);
  cpu::detail::check_layernorm_forward_args(kName, out, mean, rstd, inp1, weight, bias, BT, C);
  if (out == residual || out == inp1 || out == inp2) {
    throw KernelError(fmt::format("{}: out aliases residual or an input; expected its own "
                                  "buffer (other rows' lanes still read them)",
                                  kName));
  }
  launch_forward(out, mean, rstd, residual, inp1, inp2, weight, bias, BT, C, stream);
}

void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                        const bf16* inp, const bf16* weight, const float* mean,
                        const float* rstd, int BT, int C, float* scratch,
                        cudaStream_t stream) {
  constexpr const char* kName = "layernorm_backward";
  cpu::detail::check_layernorm_backward_args(kName, dinp, dweight, dbias, dout, inp, weight,
                                             mean, rstd, BT, C);
  detail::require_tensor(kName, "scratch", scratch);
  const int slots = vector_slots(C);
  const bool vector_path = slots > 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) &&
                           aligned16(weight);
  int blocks = backward_blocks(BT);  // partials written; never more than the scratch holds
  if (vector_path) {
    blocks = static_cast<int>(std::min<std::int64_t>(
        {device::ceil_div(BT, kBackwardWarps), kBackwardWarpBlocksMax, blocks}));
    const std::size_t smem = backward_warp_smem_bytes(C);
    device::with_slots<kMaxVectorSlots>(slots, [&](auto k) {
      const auto kernel = layernorm_backward_warp_kernel<decltype(k)::value>;
      if (smem > kDefaultSmemBytes) {  // the opt-in costs a driver call: only when needed
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
      }
      kernel<<<blocks, kBackwardWarps * device::kWarpSize, smem, stream>>>(
          dinp, scratch, dout, inp, weight, mean, rstd, BT, C);
    });
  } else {
    layernorm_backward_kernel<<<blocks, kBackwardThreads, 0, stream>>>(dinp, scratch, dout, inp,
                                                                       weight, mean, rstd, BT, C);
  }
  CUDA_CHECK_LAUNCH();
  norm::reduce_partials<2>(dweight, dbias, scratch, blocks, C, stream);
}

}  // namespace strata::kernels::cuda
