// LayerNorm forward (optionally with the residual add fused in) and backward; see
// layernorm.h. Forward: one warp per row, two passes over the row for mean then variance
// (numerically safer than E[x^2] - E[x]^2), a third to write. Backward: one block per
// group of rows; thread t owns columns t, t + 256, ... so its dinp elements and its
// per-block dweight/dbias partials need no atomics; a second kernel adds the partials in
// block order.
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
// Backward blocks, each owning a dweight/dbias partial: 1024 keeps every SM of an H100 busy
// (256 left the kernel latency-bound at ~500 GB/s on GPT-2 1.5B's (8192, 1600) rows).
constexpr int kMaxPartialBlocks = 1024;
constexpr int kReduceCols = 32;  // partial reduction: columns per block (one per lane)
constexpr int kReduceRows = 8;   // ... and row groups, combined in y order

int backward_blocks(int BT) { return std::min(BT, kMaxPartialBlocks); }

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

// The same backward with 16-byte accesses, for C % 8 == 0 and C <= 8 * kBackwardThreads *
// kMaxVectorsPerThread: thread t always owns the column vectors t, t + kBackwardThreads, ...,
// so it keeps a row's values in registers between the two passes and its dweight/dbias
// partials in registers across rows (written once at the end). Rows are visited in the same
// order as the scalar kernel, so each column's partial sums in the same order.
constexpr int kMaxVectorsPerThread = 2;
__global__ void __launch_bounds__(kBackwardThreads)
    layernorm_backward_vector_kernel(bf16* __restrict__ dinp, float* __restrict__ partial,
                                     const bf16* __restrict__ dout, const bf16* __restrict__ inp,
                                     const bf16* __restrict__ weight,
                                     const float* __restrict__ mean,
                                     const float* __restrict__ rstd, int BT, int C) {
  constexpr int kV = device::kBf16PerVector;
  constexpr int kK = kMaxVectorsPerThread;
  const int vectors = C / kV;
  float dw[kK][kV] = {};
  float db[kK][kV] = {};
  for (int row = blockIdx.x; row < BT; row += gridDim.x) {
    const std::int64_t base = static_cast<std::int64_t>(row) * C;
    const float m = mean[row];
    const float s = rstd[row];
    float dy[kK][kV], xhat[kK][kV], w[kK][kV];
    float g_sum = 0.0f;
    float gx_sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      const int v = threadIdx.x + k * kBackwardThreads;
      if (v >= vectors) continue;
      device::load8(dout + base + v * kV, dy[k]);
      device::load8(inp + base + v * kV, xhat[k]);
      device::load8(weight + v * kV, w[k]);
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        xhat[k][e] = (xhat[k][e] - m) * s;
        const float g = dy[k][e] * w[k][e];
        g_sum += g;
        gx_sum += g * xhat[k][e];
      }
    }
    block_sum2(g_sum, gx_sum);
    const float g_mean = g_sum / C;
    const float gx_mean = gx_sum / C;
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      const int v = threadIdx.x + k * kBackwardThreads;
      if (v >= vectors) continue;
      float acc[kV];
      device::load8(dinp + base + v * kV, acc);
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        acc[e] += s * (dy[k][e] * w[k][e] - g_mean - xhat[k][e] * gx_mean);
        dw[k][e] += dy[k][e] * xhat[k][e];
        db[k][e] += dy[k][e];
      }
      device::store8(dinp + base + v * kV, acc);
    }
  }
  float* dw_part = partial + static_cast<std::int64_t>(blockIdx.x) * 2 * C;
  float* db_part = dw_part + C;
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    const int v = threadIdx.x + k * kBackwardThreads;
    if (v >= vectors) continue;
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      dw_part[v * kV + e] = dw[k][e];
      db_part[v * kV + e] = db[k][e];
    }
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
  layernorm_forward_kernel<<<grid, kForwardWarps * device::kWarpSize, 0, stream>>>(
      out, mean, rstd, residual, inp1, inp2, weight, bias, BT, C);
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

std::int64_t layernorm_backward_scratch_floats(int BT, int C) {
  return static_cast<std::int64_t>(backward_blocks(std::max(BT, 1))) * 2 * C;
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
  const int blocks = backward_blocks(BT);
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  const bool vector_path = C % device::kBf16PerVector == 0 &&
                           C <= device::kBf16PerVector * kBackwardThreads * kMaxVectorsPerThread &&
                           aligned(dinp) && aligned(dout) && aligned(inp) && aligned(weight);
  if (vector_path) {
    layernorm_backward_vector_kernel<<<blocks, kBackwardThreads, 0, stream>>>(
        dinp, scratch, dout, inp, weight, mean, rstd, BT, C);
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
