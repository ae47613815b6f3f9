// LayerNorm forward (optionally with the residual add fused in) and backward; see
// layernorm.h. Forward: one warp per row; with 16-byte aligned rows (C % 8 == 0) the row sits
// in the lanes' registers (read once, mean then variance from there); otherwise two passes
// over memory for mean then variance (numerically safer than E[x^2] - E[x]^2), a third to
// write. Backward: with aligned rows one warp per row, its dweight/dbias terms in per-warp
// shared-memory accumulators; otherwise one block per group of rows, thread t owning columns
// t, t + 256, .... Either way each block writes one partial, with no atomics, and a second
// kernel adds the partials in block order.
#include "kernels/cuda/layernorm.h"

#include <cstdint>

#include <algorithm>

#include "kernels/cpu/layernorm.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr float kEps = cpu::kLayerNormEps;
constexpr int kForwardWarps = 8;        // rows per forward block
constexpr int kBackwardThreads = 256;   // threads per backward block
constexpr int kReduceCols = 32;  // partial reduction: columns per block (one per lane)
constexpr int kReduceRows = 8;   // ... and row groups, combined in y order

// Backward blocks, each owning a dweight/dbias partial (scratch_sizes.h).
int backward_blocks(int BT) { return layernorm_backward_blocks(BT); }

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
  const bf16* x = inp1 + base;
  if (inp2 != nullptr) {
    // residual may alias inp1 or inp2: each element is read, then written, by one lane.
    for (int c = lane; c < C; c += device::kWarpSize) {
      residual[base + c] = device::to_bf16(device::to_f32(inp1[base + c]) +
                                           device::to_f32(inp2[base + c]));
    }
    x = residual + base;  // this lane re-reads only elements it wrote itself
    __syncwarp();         // ...but the sum below reads other lanes' elements
  }
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

// Sums a and b over the block (256 threads) in a fixed order; every thread gets the totals.
__device__ void block_sum2(float& a, float& b) {
  __shared__ float warp_a[kBackwardThreads / device::kWarpSize];
  __shared__ float warp_b[kBackwardThreads / device::kWarpSize];
  const int warp = threadIdx.x / device::kWarpSize;
  const float wa = device::warp_sum(a);
  const float wb = device::warp_sum(b);
  __syncthreads();  // the previous call's readers are done with warp_a / warp_b
  if (threadIdx.x % device::kWarpSize == 0) {
    warp_a[warp] = wa;
    warp_b[warp] = wb;
  }
  __syncthreads();
  a = 0.0f;
  b = 0.0f;
  for (int w = 0; w < kBackwardThreads / device::kWarpSize; ++w) {
    a += warp_a[w];
    b += warp_b[w];
  }
}

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
    block_sum2(g_sum, gx_sum);
    const float g_mean = g_sum / C;
    const float gx_mean = gx_sum / C;
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

// dweight[c] += sum over blocks of the partials: thread (x, y) sums blocks y, y + 8, ... of
// column x, then the 8 sums are added in y order (a fixed order: the same bits every run).
__global__ void layernorm_reduce_partials_kernel(float* __restrict__ dweight,
                                                 float* __restrict__ dbias,
                                                 const float* __restrict__ partial, int blocks,
                                                 int C) {
  __shared__ float sum_w[kReduceRows][kReduceCols + 1];
  __shared__ float sum_b[kReduceRows][kReduceCols + 1];
  const int c = blockIdx.x * kReduceCols + threadIdx.x;
  float dw = 0.0f;
  float db = 0.0f;
  if (c < C) {
    for (int b = threadIdx.y; b < blocks; b += kReduceRows) {
      dw += partial[static_cast<std::int64_t>(b) * 2 * C + c];
      db += partial[static_cast<std::int64_t>(b) * 2 * C + C + c];
    }
  }
  sum_w[threadIdx.y][threadIdx.x] = dw;
  sum_b[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float w = 0.0f;
  float bsum = 0.0f;
  for (int y = 0; y < kReduceRows; ++y) {
    w += sum_w[y][threadIdx.x];
    bsum += sum_b[y][threadIdx.x];
  }
  dweight[c] += w;
  dbias[c] += bsum;
}

// ---------------------------------------------------------------------------------------
// Launchers

void check_forward(const char* kName, const bf16* out, const float* mean, const float* rstd,
                   const bf16* inp, const bf16* weight, const bf16* bias, int BT, int C) {
  detail::require_tensor(kName, "out", out);
  detail::require_tensor(kName, "mean", mean);
  detail::require_tensor(kName, "rstd", rstd);
  detail::require_tensor(kName, "inp", inp);
  detail::require_tensor(kName, "weight", weight);
  detail::require_tensor(kName, "bias", bias);
  detail::require_positive(kName, "BT", BT);
  detail::require_positive(kName, "C", C);
}

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
  check_forward("layernorm_forward", out, mean, rstd, inp, weight, bias, BT, C);
  launch_forward(out, mean, rstd, nullptr, inp, nullptr, weight, bias, BT, C, stream);
}

void fused_residual_layernorm_forward(bf16* residual, bf16* out, float* mean, float* rstd,
                                      const bf16* inp1, const bf16* inp2, const bf16* weight,
                                      const bf16* bias, int BT, int C, cudaStream_t stream) {
  constexpr const char* kName = "fused_residual_layernorm_forward";
  detail::require_tensor(kName, "residual", residual);
  detail::require_tensor(kName, "inp2", inp2);
  check_forward(kName, out, mean, rstd, inp1, weight, bias, BT, C);
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
  detail::require_tensor(kName, "dinp", dinp);
  detail::require_tensor(kName, "dweight", dweight);
  detail::require_tensor(kName, "dbias", dbias);
  detail::require_tensor(kName, "dout", dout);
  detail::require_tensor(kName, "inp", inp);
  detail::require_tensor(kName, "weight", weight);
  detail::require_tensor(kName, "mean", mean);
  detail::require_tensor(kName, "rstd", rstd);
  detail::require_tensor(kName, "scratch", scratch);
  detail::require_positive(kName, "BT", BT);
  detail::require_positive(kName, "C", C);
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
  const dim3 reduce_block(kReduceCols, kReduceRows);
  const dim3 reduce_grid(static_cast<unsigned>(device::ceil_div(C, kReduceCols)));
  layernorm_reduce_partials_kernel<<<reduce_grid, reduce_block, 0, stream>>>(dweight, dbias,
                                                                            scratch, blocks, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::kernels::cuda
