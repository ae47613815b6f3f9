// Flash-style causal attention, forward and backward (see attention.h).
//
// Work split (W = 8 warps per block, tiles of 32 rows through shared memory):
//   forward      one warp per query row i; key/value tiles of 32 keys, lane j scores key j,
//                online softmax (running max m, denominator l, output rescaled by
//                exp(m_old - m_new)); lane owns output dims lane, lane + 32, ...
//   rowsum       D[i] = sum_d dout[i, d] * out[i, d], one warp per row
//   dK/dV        one warp per key row j; query tiles i >= j:
//                  p = exp(s_ij - lse_i), dv_j += p dout_i, ds = p (dout_i . v_j - D_i),
//                  dk_j += ds q_i * scale
//   dQ           one warp per query row i; key tiles j <= i: dq_i += ds k_j * scale
// dK/dV and dQ each recompute p (twice the forward's exponentials) in exchange for no
// atomics: every gradient element has one owner and a fixed summation order.
#include "kernels/cuda/attention.h"

#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kWarps = 8;   // rows owned per block
constexpr int kTile = 32;   // rows per shared-memory tile (one per lane)
constexpr int kThreads = kWarps * device::kWarpSize;

// Addressing of the packed tensors.
struct Layout {
  int T, C, NH, HS;
  __device__ std::int64_t row(int b, int t) const { return static_cast<std::int64_t>(b) * T + t; }
  __device__ std::int64_t q(int b, int t, int h) const { return row(b, t) * 3 * C + h * HS; }
  __device__ std::int64_t k(int b, int t, int h) const { return q(b, t, h) + C; }
  __device__ std::int64_t v(int b, int t, int h) const { return q(b, t, h) + 2 * C; }
  __device__ std::int64_t o(int b, int t, int h) const { return row(b, t) * C + h * HS; }
  __device__ std::int64_t stat(int b, int h, int t) const {
    return (static_cast<std::int64_t>(b) * NH + h) * T + t;
  }
};

// Loads rows [first, first + kTile) of one head of a (B, T, stride) tensor into
// tile[kTile][HS + pad] as fp32; rows past T are zero. All kThreads threads take part.
template <int HS, int kPad>
__device__ void load_tile(float (*tile)[HS + kPad], const bf16* base, std::int64_t row_stride,
                          int first, int T) {
  for (int e = threadIdx.x; e < kTile * HS; e += kThreads) {
    const int r = e / HS;
    const int d = e % HS;
    const int t = first + r;
    tile[r][d] = t < T ? device::to_f32(base[static_cast<std::int64_t>(t) * row_stride + d]) : 0.0f;
  }
}

// Loads one HS-vector (one lane per d step) as fp32.
template <int HS>
__device__ void load_row(float* dst, const bf16* src) {
  for (int d = threadIdx.x % device::kWarpSize; d < HS; d += device::kWarpSize)
    dst[d] = device::to_f32(src[d]);
}

// ---------------------------------------------------------------------------------------
// Kernels

template <int HS>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(bf16* __restrict__ out, float* __restrict__ lse,
                             const bf16* __restrict__ qkv, Layout L) {
  constexpr int kDims = HS / device::kWarpSize;  // output dims per lane
  __shared__ float ks[kTile][HS + 1];            // +1: lane j reads row j, conflict-free
  __shared__ float vs[kTile][HS];
  __shared__ float qs[kWarps][HS];
  const int b = blockIdx.z, h = blockIdx.y;
  const int warp = threadIdx.x / device::kWarpSize, lane = threadIdx.x % device::kWarpSize;
  const int first_row = blockIdx.x * kWarps;
  const int row = first_row + warp;
  const bool active = row < L.T;
  const int last_row = min(first_row + kWarps - 1, L.T - 1);
  const float scale = rsqrtf(static_cast<float>(HS));
  const std::int64_t head_stride = 3 * static_cast<std::int64_t>(L.C);

  if (active) load_row<HS>(qs[warp], qkv + L.q(b, row, h));
  float m = -INFINITY, l = 0.0f, acc[kDims] = {};
  for (int first_key = 0; first_key <= last_row; first_key += kTile) {
    __syncthreads();  // previous tile fully consumed
    load_tile<HS, 1>(ks, qkv + L.k(b, 0, h), head_stride, first_key, L.T);
    load_tile<HS, 0>(vs, qkv + L.v(b, 0, h), head_stride, first_key, L.T);
    __syncthreads();
    if (!active) continue;
    const int key = first_key + lane;
    float s = -INFINITY;
    if (key <= row) {  // key <= row < T
      float dot = 0.0f;
      for (int d = 0; d < HS; ++d) dot += qs[warp][d] * ks[lane][d];
      s = dot * scale;
    }
    // Key 0 is in the first tile and visible to every row, so m is finite from then on and
    // exp(-inf - m) = 0 for masked keys; a fully masked later tile leaves m unchanged.
    const float m_new = fmaxf(m, device::warp_max(s));
    const float p = expf(s - m_new);
    const float correction = expf(m - m_new);  // 0 on the first tile (m = -inf)
    l = l * correction + device::warp_sum(p);
    for (int r = 0; r < kDims; ++r) acc[r] *= correction;
    for (int j = 0; j < kTile; ++j) {
      const float pj = __shfl_sync(device::kFullMask, p, j);
      for (int r = 0; r < kDims; ++r) acc[r] += pj * vs[j][lane + r * device::kWarpSize];
    }
    m = m_new;
  }
  if (!active) return;
  const float inv_l = 1.0f / l;
  bf16* o = out + L.o(b, row, h);
  for (int r = 0; r < kDims; ++r) o[lane + r * device::kWarpSize] = device::to_bf16(acc[r] * inv_l);
  if (lane == 0) lse[L.stat(b, h, row)] = m + logf(l);
}

// D[b, h, t] = sum_d dout * out over the head's HS dims; one warp per (b, t, h) row.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    attention_rowsum_kernel(float* __restrict__ D, const bf16* __restrict__ dout,
                            const bf16* __restrict__ out, Layout L, int B) {
  const int lane = threadIdx.x % device::kWarpSize;
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / device::kWarpSize;
  if (r >= static_cast<std::int64_t>(B) * L.T * L.NH) return;
  const int h = static_cast<int>(r % L.NH);
  const int t = static_cast<int>((r / L.NH) % L.T);
  const int b = static_cast<int>(r / (static_cast<std::int64_t>(L.NH) * L.T));
  const std::int64_t o = L.o(b, t, h);
  float sum = 0.0f;
  for (int d = lane; d < HS; d += device::kWarpSize)
    sum += device::to_f32(dout[o + d]) * device::to_f32(out[o + d]);
  sum = device::warp_sum(sum);
  if (lane == 0) D[L.stat(b, h, t)] = sum;
}

template <int HS>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(bf16* __restrict__ dqkv, const bf16* __restrict__ dout,
                          const bf16* __restrict__ qkv, const float* __restrict__ lse,
                          const float* __restrict__ D, Layout L) {
  constexpr int kDims = HS / device::kWarpSize;
  __shared__ float qs[kTile][HS + 1];
  __shared__ float dos[kTile][HS + 1];
  __shared__ float lse_s[kTile];
  __shared__ float d_s[kTile];
  __shared__ float kw[kWarps][HS];
  __shared__ float vw[kWarps][HS];
  const int b = blockIdx.z, h = blockIdx.y;
  const int warp = threadIdx.x / device::kWarpSize, lane = threadIdx.x % device::kWarpSize;
  const int first_key = blockIdx.x * kWarps;
  const int key = first_key + warp;
  const bool active = key < L.T;
  const float scale = rsqrtf(static_cast<float>(HS));
  const std::int64_t qkv_stride = 3 * static_cast<std::int64_t>(L.C);

  if (active) {
    load_row<HS>(kw[warp], qkv + L.k(b, key, h));
    load_row<HS>(vw[warp], qkv + L.v(b, key, h));
  }
  float dk[kDims] = {}, dv[kDims] = {};
  // Queries before first_key see none of this block's keys; start at its tile.
  for (int first_q = first_key / kTile * kTile; first_q < L.T; first_q += kTile) {
    __syncthreads();
    load_tile<HS, 1>(qs, qkv + L.q(b, 0, h), qkv_stride, first_q, L.T);
    load_tile<HS, 1>(dos, dout + L.o(b, 0, h), L.C, first_q, L.T);
    if (threadIdx.x < kTile) {
      const int t = first_q + threadIdx.x;
      lse_s[threadIdx.x] = t < L.T ? lse[L.stat(b, h, t)] : 0.0f;
      d_s[threadIdx.x] = t < L.T ? D[L.stat(b, h, t)] : 0.0f;
    }
    __syncthreads();
    if (!active) continue;
    const int query = first_q + lane;
    float p = 0.0f, ds = 0.0f;
    if (query < L.T && query >= key) {
      float s = 0.0f, dp = 0.0f;
      for (int d = 0; d < HS; ++d) {
        s += qs[lane][d] * kw[warp][d];
        dp += dos[lane][d] * vw[warp][d];
      }
      p = expf(s * scale - lse_s[lane]);
      ds = p * (dp - d_s[lane]);
    }
    for (int i = 0; i < kTile; ++i) {
      const float pi = __shfl_sync(device::kFullMask, p, i);
      const float dsi = __shfl_sync(device::kFullMask, ds, i);
      for (int r = 0; r < kDims; ++r) {
        dv[r] += pi * dos[i][lane + r * device::kWarpSize];
        dk[r] += dsi * qs[i][lane + r * device::kWarpSize];
      }
    }
  }
  if (!active) return;
  bf16* dk_out = dqkv + L.k(b, key, h);
  bf16* dv_out = dqkv + L.v(b, key, h);
  for (int r = 0; r < kDims; ++r) {
    const int d = lane + r * device::kWarpSize;
    dk_out[d] = device::to_bf16(device::to_f32(dk_out[d]) + dk[r] * scale);
    dv_out[d] = device::to_bf16(device::to_f32(dv_out[d]) + dv[r]);
  }
}

template <int HS>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(bf16* __restrict__ dqkv, const bf16* __restrict__ dout,
                        const bf16* __restrict__ qkv, const float* __restrict__ lse,
                        const float* __restrict__ D, Layout L) {
  constexpr int kDims = HS / device::kWarpSize;
  __shared__ float ks[kTile][HS + 1];
  __shared__ float vs[kTile][HS + 1];
  __shared__ float qw[kWarps][HS];
  __shared__ float dow[kWarps][HS];
  const int b = blockIdx.z, h = blockIdx.y;
  const int warp = threadIdx.x / device::kWarpSize, lane = threadIdx.x % device::kWarpSize;
  const int first_row = blockIdx.x * kWarps;
  const int row = first_row + warp;
  const bool active = row < L.T;
  const int last_row = min(first_row + kWarps - 1, L.T - 1);
  const float scale = rsqrtf(static_cast<float>(HS));
  const std::int64_t qkv_stride = 3 * static_cast<std::int64_t>(L.C);

  float row_lse = 0.0f, row_d = 0.0f;
  if (active) {
    load_row<HS>(qw[warp], qkv + L.q(b, row, h));
    load_row<HS>(dow[warp], dout + L.o(b, row, h));
    row_lse = lse[L.stat(b, h, row)];
    row_d = D[L.stat(b, h, row)];
  }
  float dq[kDims] = {};
  for (int first_key = 0; first_key <= last_row; first_key += kTile) {
    __syncthreads();
    load_tile<HS, 1>(ks, qkv + L.k(b, 0, h), qkv_stride, first_key, L.T);
    load_tile<HS, 1>(vs, qkv + L.v(b, 0, h), qkv_stride, first_key, L.T);
    __syncthreads();
    if (!active) continue;
    const int key = first_key + lane;
    float ds = 0.0f;
    if (key <= row) {
      float s = 0.0f, dp = 0.0f;
      for (int d = 0; d < HS; ++d) {
        s += qw[warp][d] * ks[lane][d];
        dp += dow[warp][d] * vs[lane][d];
      }
      const float p = expf(s * scale - row_lse);
      ds = p * (dp - row_d);
    }
    for (int j = 0; j < kTile; ++j) {
      const float dsj = __shfl_sync(device::kFullMask, ds, j);
      for (int r = 0; r < kDims; ++r) dq[r] += dsj * ks[j][lane + r * device::kWarpSize];
    }
  }
  if (!active) return;
  bf16* dq_out = dqkv + L.q(b, row, h);
  for (int r = 0; r < kDims; ++r) {
    const int d = lane + r * device::kWarpSize;
    dq_out[d] = device::to_bf16(device::to_f32(dq_out[d]) + dq[r] * scale);
  }
}

// ---------------------------------------------------------------------------------------
// Launchers

void check_shapes(const char* kernel, int B, int T, int C, int NH) {
  detail::require_positive(kernel, "B", B);
  detail::require_positive(kernel, "T", T);
  detail::require_positive(kernel, "C", C);
  detail::require_positive(kernel, "NH", NH);
  if (C % NH != 0) {
    throw KernelError(fmt::format("{}: C = {} is not divisible by NH = {}; expected C = NH * HS",
                                  kernel, C, NH));
  }
  detail::require_one_of(kernel, "HS = C / NH", C / NH, 64, 128);
  if (B > 65535 || NH > 65535) {
    throw KernelError(fmt::format("{}: B = {}, NH = {}; expected both <= 65535 (grid limit)",
                                  kernel, B, NH));
  }
}

dim3 row_grid(int B, int T, int NH) {
  return dim3(static_cast<unsigned>(device::ceil_div(T, kWarps)), static_cast<unsigned>(NH),
              static_cast<unsigned>(B));
}

}  // namespace

void attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                       cudaStream_t stream) {
  constexpr const char* kName = "attention_forward";
  detail::require_tensor(kName, "out", out);
  detail::require_tensor(kName, "lse", lse);
  detail::require_tensor(kName, "qkv", qkv);
  check_shapes(kName, B, T, C, NH);
  const Layout L{T, C, NH, C / NH};
  if (L.HS == 64) {
    attention_forward_kernel<64><<<row_grid(B, T, NH), kThreads, 0, stream>>>(out, lse, qkv, L);
  } else {
    attention_forward_kernel<128><<<row_grid(B, T, NH), kThreads, 0, stream>>>(out, lse, qkv, L);
  }
  CUDA_CHECK_LAUNCH();
}

std::int64_t attention_backward_scratch_floats(int B, int T, int NH) {
  return static_cast<std::int64_t>(B) * NH * T;
}

void attention_backward(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv,
                        const bf16* out, const float* lse, int B, int T, int C, int NH,
                        cudaStream_t stream) {
  constexpr const char* kName = "attention_backward";
  detail::require_tensor(kName, "dqkv", dqkv);
  detail::require_tensor(kName, "scratch", scratch);
  detail::require_tensor(kName, "dout", dout);
  detail::require_tensor(kName, "qkv", qkv);
  detail::require_tensor(kName, "out", out);
  detail::require_tensor(kName, "lse", lse);
  check_shapes(kName, B, T, C, NH);
  const Layout L{T, C, NH, C / NH};
  const int rowsum_grid =
      static_cast<int>(device::ceil_div(static_cast<std::int64_t>(B) * T * NH, kWarps));
  const dim3 grid = row_grid(B, T, NH);
  if (L.HS == 64) {
    attention_rowsum_kernel<64><<<rowsum_grid, kThreads, 0, stream>>>(scratch, dout, out, L, B);
    CUDA_CHECK_LAUNCH();
    attention_dkdv_kernel<64><<<grid, kThreads, 0, stream>>>(dqkv, dout, qkv, lse, scratch, L);
    CUDA_CHECK_LAUNCH();
    attention_dq_kernel<64><<<grid, kThreads, 0, stream>>>(dqkv, dout, qkv, lse, scratch, L);
  } else {
    attention_rowsum_kernel<128><<<rowsum_grid, kThreads, 0, stream>>>(scratch, dout, out, L, B);
    CUDA_CHECK_LAUNCH();
    attention_dkdv_kernel<128><<<grid, kThreads, 0, stream>>>(dqkv, dout, qkv, lse, scratch, L);
    CUDA_CHECK_LAUNCH();
    attention_dq_kernel<128><<<grid, kThreads, 0, stream>>>(dqkv, dout, qkv, lse, scratch, L);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::kernels::cuda
