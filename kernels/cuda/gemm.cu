// matmul_forward / matmul_backward (see gemm.h). Row-major tensors are handed to cuBLASLt,
// which is column-major, as their transposes: a row-major (R, S) matrix is a column-major
// (S, R) one with leading dimension S, so out^T = weight @ inp^T needs no copies.
#include "kernels/cuda/gemm.h"

#include <algorithm>
#include <cstdint>
#include <memory>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/device_utils.cuh"

namespace strata::kernels::cuda {
namespace {

// ---------------------------------------------------------------------------------------
// Kernels

// dbias[o] += sum_i dout[i, o] over i in [0, BT). Block (32, 32): threadIdx.x picks one of
// 32 adjacent columns, threadIdx.y strides the rows; the 32 partial sums of a column are then
// added in y order. The order never depends on timing, so the result is bit-identical on
// every run (no atomics).
constexpr int kBiasCols = 32;
constexpr int kBiasRows = 32;

__global__ void bias_backward_kernel(float* dbias, const bf16* dout, int BT, int OC) {
  __shared__ float partial[kBiasRows][kBiasCols + 1];  // +1: no bank conflicts on the read
  const int o = blockIdx.x * kBiasCols + threadIdx.x;
  float sum = 0.0f;
  if (o < OC) {
    for (int i = threadIdx.y; i < BT; i += kBiasRows) {
      sum += device::to_f32(dout[static_cast<std::int64_t>(i) * OC + o]);
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && o < OC) {
    float total = 0.0f;
    for (int y = 0; y < kBiasRows; ++y) total += partial[y][threadIdx.x];
    dbias[o] += total;
  }
}

// The same sum for 16-byte aligned rows (OC % 8 == 0) in two stages, so that every SM is busy
// even when OC is small (GPT-2's 768 columns gave the kernel above 24 blocks).
// Stage 1, block (column group x, row split y): the 32 lanes of a warp cover kBiasGroupCols
// adjacent columns with 16-byte loads, the 8 warps stride the split's rows, and the warps'
// sums are added in warp order into partial[y][column].
// Stage 2: dbias[o] += partial[0][o] + partial[1][o] + ... in split order.
// Each column's order is fixed by the shapes alone: the same bits on every run.
constexpr int kBiasWarps = 8;
constexpr int kBiasGroupCols = device::kWarpSize * device::kBf16PerVector;  // 256
constexpr int kBiasTargetBlocks = 1024;  // enough to fill an H100's 132 SMs several times
constexpr int kBiasUnroll = 4;           // rows in flight per warp

__global__ void __launch_bounds__(kBiasWarps * device::kWarpSize)
    bias_partial_kernel(float* __restrict__ partial, const bf16* __restrict__ dout, int BT,
                        int OC, int rows_per_split) {
  constexpr int kV = device::kBf16PerVector;
  // [warp][e * 32 + lane] holds column lane * 8 + e: conflict-free writes and reads.
  __shared__ float sums[kBiasWarps][kBiasGroupCols];
  const int lane = threadIdx.x % device::kWarpSize;
  const int warp = threadIdx.x / device::kWarpSize;
  const int col = blockIdx.x * kBiasGroupCols + lane * kV;
  const int begin = blockIdx.y * rows_per_split;
  const int end = min(BT, begin + rows_per_split);
  float acc[kV] = {};
  if (col < OC) {
    const bf16* p = dout + col;
    int r = begin + warp;
    for (; r + (kBiasUnroll - 1) * kBiasWarps < end; r += kBiasUnroll * kBiasWarps) {
      float v[kBiasUnroll][kV];
#pragma unroll
      for (int u = 0; u < kBiasUnroll; ++u) {
        device::load8(p + static_cast<std::int64_t>(r + u * kBiasWarps) * OC, v[u]);
      }
#pragma unroll
      for (int u = 0; u < kBiasUnroll; ++u) {
#pragma unroll
        for (int e = 0; e < kV; ++e) acc[e] += v[u][e];
      }
    }
    for (; r < end; r += kBiasWarps) {
      float v[kV];
      device::load8(p + static_cast<std::int64_t>(r) * OC, v);
#pragma unroll
      for (int e = 0; e < kV; ++e) acc[e] += v[e];
    }
  }
#pragma unroll
  for (int e = 0; e < kV; ++e) sums[warp][e * device::kWarpSize + lane] = acc[e];
  __syncthreads();
  const int c = threadIdx.x;  // the block's column c = lane' * 8 + e'
  const int o = blockIdx.x * kBiasGroupCols + c;
  if (o >= OC) return;
  float total = 0.0f;
  for (int w = 0; w < kBiasWarps; ++w) total += sums[w][(c % kV) * device::kWarpSize + c / kV];
  partial[static_cast<std::int64_t>(blockIdx.y) * OC + o] = total;
}

__global__ void bias_reduce_partials_kernel(float* __restrict__ dbias,
                                            const float* __restrict__ partial, int splits,
                                            int OC) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= OC) return;
  float total = 0.0f;
  for (int y = 0; y < splits; ++y) total += partial[static_cast<std::int64_t>(y) * OC + o];
  dbias[o] += total;
}

// dbias += column sums of dout through whichever kernel fits.
void bias_backward(float* dbias, const bf16* dout, int BT, int OC, const CublasLtHandle& lt,
                   cudaStream_t stream) {
  const int groups = static_cast<int>(device::ceil_div(OC, kBiasGroupCols));
  const std::int64_t scratch_splits =
      lt ? static_cast<std::int64_t>(lt.reduction_scratch_floats()) / OC : 0;
  const bool vector_path = OC % device::kBf16PerVector == 0 &&
                           reinterpret_cast<std::uintptr_t>(dout) % 16 == 0 && scratch_splits > 0;
  if (!vector_path) {
    const dim3 block(kBiasCols, kBiasRows);
    const dim3 grid(static_cast<unsigned>(device::ceil_div(OC, kBiasCols)));
    bias_backward_kernel<<<grid, block, 0, stream>>>(dbias, dout, BT, OC);
    CUDA_CHECK_LAUNCH();
    return;
  }
  // At least kBiasWarps rows per split, at most what the scratch holds.
  const std::int64_t splits = std::clamp<std::int64_t>(
      std::min<std::int64_t>(kBiasTargetBlocks / groups, device::ceil_div(BT, kBiasWarps)), 1,
      scratch_splits);
  const int rows_per_split = static_cast<int>(device::ceil_div(BT, splits));
  const int used_splits = static_cast<int>(device::ceil_div(BT, rows_per_split));
  float* partial = lt.reduction_scratch();
  bias_partial_kernel<<<dim3(static_cast<unsigned>(groups), static_cast<unsigned>(used_splits)),
                        kBiasWarps * device::kWarpSize, 0, stream>>>(partial, dout, BT, OC,
                                                                     rows_per_split);
  CUDA_CHECK_LAUNCH();
  constexpr int kReduceThreads = 256;
  bias_reduce_partials_kernel<<<static_cast<unsigned>(device::ceil_div(OC, kReduceThreads)),
                                kReduceThreads, 0, stream>>>(dbias, partial, used_splits, OC);
  CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------
// cuBLASLt plumbing

struct MatmulDescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const noexcept {
    CUBLAS_CHECK_NOEXCEPT(cublaslt().MatmulDescDestroy(d));
  }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const noexcept {
    CUBLAS_CHECK_NOEXCEPT(cublaslt().MatrixLayoutDestroy(l));
  }
};
struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const noexcept {
    CUBLAS_CHECK_NOEXCEPT(cublaslt().MatmulPreferenceDestroy(p));
  }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, MatmulDescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDeleter>;

// Column-major D: (m, n) = op(A): (m, k) @ op(B): (k, n) [+ beta * D], compute in fp32.
struct LtMatmul {
  bool trans_a = false;
  bool trans_b = false;
  int m = 0, n = 0, k = 0;
  const bf16* a = nullptr;  // stored (m, k) if !trans_a else (k, m), column-major, packed
  const bf16* b = nullptr;  // stored (k, n) if !trans_b else (n, k)
  void* d = nullptr;        // (m, n), ld = m
  cudaDataType_t d_type = CUDA_R_16BF;
  float beta = 0.0f;
  const void* c = nullptr;  // what beta multiplies: (m, n) like D; null = D itself
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // (m), D's type
  void* aux = nullptr;         // (m, n) pre-activation, ld = m, D's type
};

Layout make_layout(cudaDataType_t type, int rows, int cols) {
  cublasLtMatrixLayout_t raw = nullptr;
  CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&raw, type, static_cast<std::uint64_t>(rows),
                                          static_cast<std::uint64_t>(cols),
                                          static_cast<std::int64_t>(rows)));
  return Layout(raw);
}

template <class T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

// Runs the matmul; false (nothing enqueued) when cuBLASLt has no algorithm for it.
bool try_lt_matmul(const LtMatmul& p, const CublasLtHandle& lt, cudaStream_t stream);

void lt_matmul(const LtMatmul& p, const CublasLtHandle& lt, cudaStream_t stream) {
  if (!try_lt_matmul(p, lt, stream)) {
    throw CudaError(fmt::format(
        "cublasLtMatmulAlgoGetHeuristic found no algorithm for m={} n={} k={} transa={} "
        "transb={} epilogue={} d_type={} workspace={} bytes",
        p.m, p.n, p.k, p.trans_a, p.trans_b, static_cast<int>(p.epilogue),
        static_cast<int>(p.d_type), lt.workspace_bytes()));
  }
}

bool try_lt_matmul(const LtMatmul& p, const CublasLtHandle& lt, cudaStream_t stream) {
  cublasLtMatmulDesc_t raw_desc = nullptr;
  CUBLAS_CHECK(cublaslt().MatmulDescCreate(&raw_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  MatmulDesc desc(raw_desc);
  const cublasOperation_t op_a = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(raw_desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_desc(raw_desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  set_desc(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE, p.epilogue);
  if (p.bias != nullptr) set_desc(raw_desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  if (p.aux != nullptr) {
    set_desc(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux);
    set_desc(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<std::int64_t>(p.m));
  }

  const Layout a = p.trans_a ? make_layout(CUDA_R_16BF, p.k, p.m)
                             : make_layout(CUDA_R_16BF, p.m, p.k);
  const Layout b = p.trans_b ? make_layout(CUDA_R_16BF, p.n, p.k)
                             : make_layout(CUDA_R_16BF, p.k, p.n);
  const Layout d = make_layout(p.d_type, p.m, p.n);

  cublasLtMatmulPreference_t raw_pref = nullptr;
  CUBLAS_CHECK(cublaslt().MatmulPreferenceCreate(&raw_pref));
  Preference pref(raw_pref);
  const std::size_t workspace = lt.workspace_bytes();
  CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(
      raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
  // The heuristic assumes 256-byte aligned operands unless told otherwise; tensors inside a
  // flat parameter buffer are often less aligned, so state each operand's real alignment.
  const auto alignment = [](const void* ptr) {
    const auto address = reinterpret_cast<std::uintptr_t>(ptr);
    std::uint32_t bytes = 256;
    while (bytes > 1 && address % bytes != 0) bytes /= 2;
    return bytes;
  };
  const void* c = p.c != nullptr ? p.c : p.d;
  const std::uint32_t align_a = alignment(p.a), align_b = alignment(p.b), align_c = alignment(c),
                      align_d = alignment(p.d);
  CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(
      raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(
      raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(
      raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
  CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(
      raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d)));

  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  CUBLAS_CHECK(cublaslt().MatmulAlgoGetHeuristic(lt.get(), raw_desc, a.get(), b.get(), d.get(),
                                              d.get(), raw_pref, 1, &heuristic, &found));
  if (found == 0) return false;
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublaslt().Matmul(lt.get(), raw_desc, &alpha, p.a, a.get(), p.b, b.get(), &p.beta,
                              c, d.get(), p.d, d.get(), &heuristic.algo, lt.workspace(),
                              workspace, stream));
  return true;
}

void check_common(const char* kernel, const void* out, const bf16* inp, const bf16* weight,
                  int BT, int C, int OC) {
  detail::require_tensor(kernel, "out", out);
  detail::require_tensor(kernel, "inp", inp);
  detail::require_tensor(kernel, "weight", weight);
  detail::require_positive(kernel, "BT", BT);
  detail::require_positive(kernel, "C", C);
  detail::require_positive(kernel, "OC", OC);
}

// The forward product: out^T: (OC, BT) = (weight as stored, column-major (C, OC))^T @ inp as
// stored (C, BT), out of type d_type (no bias or epilogue: the caller sets those).
LtMatmul forward_product(void* out, cudaDataType_t d_type, const bf16* inp, const bf16* weight,
                         int BT, int C, int OC) {
  LtMatmul p;
  p.trans_a = true;
  p.m = OC;
  p.n = BT;
  p.k = C;
  p.a = weight;
  p.b = inp;
  p.d = out;
  p.d_type = d_type;
  return p;
}

// The input gradient's product: dinp^T: (C, BT) = weight-as-stored (C, OC) @ dout-as-stored
// (OC, BT), bf16 out (beta 0 and no epilogue: the caller sets those).
LtMatmul dinp_product(bf16* dinp, const bf16* dout, const bf16* weight, int BT, int C, int OC) {
  LtMatmul p;
  p.m = C;
  p.n = BT;
  p.k = OC;
  p.a = weight;
  p.b = dout;
  p.d = dinp;
  p.d_type = CUDA_R_16BF;
  return p;
}

void check_handle(const char* kernel, const CublasLtHandle& lt) {
  if (!lt) throw KernelError(fmt::format("{}: the cuBLASLt handle is empty", kernel));
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Launchers

void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int BT,
                    int C, int OC, const CublasLtHandle& lt, cudaStream_t stream,
                    GemmActivation act, bf16* pre_gelu) {
  constexpr const char* kName = "matmul_forward";
  check_common(kName, out, inp, weight, BT, C, OC);
  if (pre_gelu != nullptr) {
    if (act != GemmActivation::kGelu) {
      throw KernelError(fmt::format("{}: pre_gelu given without the GeLU activation", kName));
    }
    detail::require_multiple(kName, "OC (with pre_gelu)", OC, 8);
  }
  check_handle(kName, lt);
  LtMatmul p = forward_product(out, CUDA_R_16BF, inp, weight, BT, C, OC);
  p.bias = bias;
  p.aux = pre_gelu;
  if (act == GemmActivation::kNone) {
    p.epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  } else if (pre_gelu != nullptr) {
    p.epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  } else {
    p.epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  }
  lt_matmul(p, lt, stream);
}

void matmul_forward_residual(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias,
                             const bf16* residual, int BT, int C, int OC,
                             const CublasLtHandle& lt, cudaStream_t stream) {
  constexpr const char* kName = "matmul_forward_residual";
  check_common(kName, out, inp, weight, BT, C, OC);
  detail::require_tensor(kName, "residual", residual);
  check_handle(kName, lt);
  LtMatmul p = forward_product(out, CUDA_R_16BF, inp, weight, BT, C, OC);
  p.bias = bias;
  p.epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  p.c = residual;  // D = A B + 1 * residual (+ bias): one rounding to bf16
  p.beta = 1.0f;
  lt_matmul(p, lt, stream);
}

void matmul_forward(float* out, const bf16* inp, const bf16* weight, const float* bias,
                    int BT, int C, int OC, const CublasLtHandle& lt, cudaStream_t stream) {
  check_common("matmul_forward", out, inp, weight, BT, C, OC);
  check_handle("matmul_forward", lt);
  LtMatmul p = forward_product(out, CUDA_R_32F, inp, weight, BT, C, OC);
  p.bias = bias;
  p.epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  lt_matmul(p, lt, stream);
}

void matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int BT, int C, int OC,
                     const CublasLtHandle& lt, cudaStream_t stream, bool overwrite_dinp) {
  constexpr const char* kName = "matmul_backward";
  detail::require_tensor(kName, "dout", dout);
  if (dinp != nullptr) detail::require_tensor(kName, "weight", weight);
  if (dweight != nullptr) detail::require_tensor(kName, "inp", inp);
  detail::require_positive(kName, "BT", BT);
  detail::require_positive(kName, "C", C);
  detail::require_positive(kName, "OC", OC);
  if (dinp != nullptr || dweight != nullptr) check_handle(kName, lt);

  if (dinp != nullptr) {
    LtMatmul p = dinp_product(dinp, dout, weight, BT, C, OC);
    p.beta = overwrite_dinp ? 0.0f : 1.0f;
    lt_matmul(p, lt, stream);
  }
  if (dweight != nullptr) {
    // dweight^T: (C, OC) += inp-as-stored (C, BT) @ (dout-as-stored (OC, BT))^T.
    LtMatmul p;
    p.trans_b = true;
    p.m = C;
    p.n = OC;
    p.k = BT;
    p.a = inp;
    p.b = dout;
    p.d = dweight;
    p.d_type = CUDA_R_32F;
    p.beta = 1.0f;
    lt_matmul(p, lt, stream);
  }
  if (dbias != nullptr) bias_backward(dbias, dout, BT, OC, lt, stream);
}

void matmul_backward_dgelu(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                           const bf16* inp, const bf16* weight, const bf16* pre_gelu, int BT,
                           int C, int OC, const CublasLtHandle& lt, cudaStream_t stream) {
  constexpr const char* kName = "matmul_backward_dgelu";
  detail::require_tensor(kName, "dinp", dinp);
  detail::require_tensor(kName, "weight", weight);
  detail::require_tensor(kName, "pre_gelu", pre_gelu);
  detail::require_positive(kName, "BT", BT);
  detail::require_positive(kName, "C", C);
  detail::require_positive(kName, "OC", OC);
  detail::require_multiple(kName, "C (the pre-GeLU's columns)", C, 8);
  check_handle(kName, lt);
  matmul_backward(nullptr, dweight, dbias, dout, inp, weight, BT, C, OC, lt, stream);
  // dinp = gelu'(pre_gelu) * (the product), the GeLU's derivative applied in the epilogue.
  LtMatmul p = dinp_product(dinp, dout, weight, BT, C, OC);
  p.epilogue = CUBLASLT_EPILOGUE_DGELU;
  p.aux = const_cast<bf16*>(pre_gelu);  // read-only for DGELU
  if (try_lt_matmul(p, lt, stream)) return;
  // No fused algorithm on this GPU / library: the plain product, then the GeLU backward.
  matmul_backward(dinp, nullptr, nullptr, dout, nullptr, weight, BT, C, OC, lt, stream, true);
  gelu_backward(dinp, pre_gelu, dinp, static_cast<std::int64_t>(BT) * C, stream, false);
}

}  // namespace strata::kernels::cuda
