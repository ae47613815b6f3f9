// Multi-tensor AdamW and sum of squares (see adamw.h). The tensor list travels in one
// __grid_constant__ kernel parameter; element indices run over the tensors' concatenation
// and a binary search over the prefix offsets finds each element's tensor. Every element's
// update depends on that element alone, so results do not depend on the launch shape.
#include "kernels/cuda/adamw.h"

#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;  // grid-stride beyond this
constexpr int kMaxTensors = kAdamWTensorsPerLaunch;

struct TensorList {
  float* param[kMaxTensors];
  const float* grad[kMaxTensors];
  float* m[kMaxTensors];
  float* v[kMaxTensors];
  bf16* param_bf16[kMaxTensors];
  std::int64_t offset[kMaxTensors + 1];  // offset[k] = elements before tensor k
  int count;
};
static_assert(sizeof(TensorList) < 4000, "kernel parameters must stay under 4 KiB");

struct StepConstants {
  float lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2, grad_scale;
};

// ---------------------------------------------------------------------------------------
// Kernels

__global__ void __launch_bounds__(kThreads)
    adamw_kernel(const __grid_constant__ TensorList list, StepConstants k) {
  const std::int64_t total = list.offset[list.count];
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       idx < total; idx += stride) {
    // Largest t with offset[t] <= idx (empty tensors have equal offsets and are skipped).
    int lo = 0, hi = list.count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (list.offset[mid] <= idx) lo = mid; else hi = mid - 1;
    }
    const std::int64_t i = idx - list.offset[lo];
    const float g = list.grad[lo][i] * k.grad_scale;
    const float mi = k.beta1 * list.m[lo][i] + (1.0f - k.beta1) * g;
    const float vi = k.beta2 * list.v[lo][i] + (1.0f - k.beta2) * g * g;
    const float mhat = mi / k.bias_correction1;
    const float vhat = vi / k.bias_correction2;
    list.m[lo][i] = mi;
    list.v[lo][i] = vi;
    float p = list.param[lo][i];
    p -= k.lr * (mhat / (sqrtf(vhat) + k.eps) + k.weight_decay * p);
    list.param[lo][i] = p;
    if (list.param_bf16[lo] != nullptr) list.param_bf16[lo][i] = device::to_bf16(p);
  }
}

constexpr int kSumBlocks = kSumOfSquaresScratchDoubles;

// partial[blockIdx.x] = sum of squares of this block's grid-strided elements; the block's
// threads are combined in a fixed tree order.
__global__ void __launch_bounds__(kThreads)
    sum_of_squares_partial_kernel(double* __restrict__ partial, const float* __restrict__ x,
                                  std::int64_t n) {
  __shared__ double part[kThreads];
  double acc = 0.0;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(kSumBlocks) * kThreads) {
    const double xi = x[i];
    acc += xi * xi;
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = part[0];
}

__global__ void sum_of_squares_final_kernel(double* result, const double* partial) {
  double total = 0.0;
  for (int b = 0; b < kSumBlocks; ++b) total += partial[b];
  *result += total;
}

// ---------------------------------------------------------------------------------------
// Launchers

void check_hyper(const char* kernel, const AdamWParams& hp, int step) {
  if (step < 1) {
    throw KernelError(fmt::format("{}: step = {}; expected >= 1 (bias correction uses "
                                  "1 - beta^step)", kernel, step));
  }
  if (!(hp.beta1 >= 0.0f && hp.beta1 < 1.0f) || !(hp.beta2 >= 0.0f && hp.beta2 < 1.0f)) {
    throw KernelError(fmt::format("{}: beta1 = {}, beta2 = {}; expected each in [0, 1)", kernel,
                                  hp.beta1, hp.beta2));
  }
  if (!(hp.eps > 0.0f)) {
    throw KernelError(fmt::format("{}: eps = {}; expected > 0", kernel, hp.eps));
  }
}

}  // namespace

void adamw_update(const std::vector<AdamWTensor>& tensors, const AdamWParams& hp, int step,
                  float grad_scale, cudaStream_t stream) {
  constexpr const char* kName = "adamw_update";
  check_hyper(kName, hp, step);
  if (!std::isfinite(grad_scale) || grad_scale <= 0.0f) {
    throw KernelError(fmt::format("{}: grad_scale = {}; expected finite and > 0", kName,
                                  grad_scale));
  }
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const AdamWTensor& x = tensors[t];
    if (x.n < 0) {
      throw KernelError(fmt::format("{}: tensors[{}].n = {}; expected >= 0", kName, t, x.n));
    }
    if (x.n > 0 && (x.param == nullptr || x.grad == nullptr || x.m == nullptr ||
                    x.v == nullptr)) {
      throw KernelError(fmt::format("{}: tensors[{}] has a null param, grad, m or v; expected "
                                    "buffers of n = {} floats", kName, t, x.n));
    }
  }
  // Same per-step constants as the CPU twin (pow in double, rounded once).
  const StepConstants k{hp.lr,
                        hp.beta1,
                        hp.beta2,
                        hp.eps,
                        hp.weight_decay,
                        1.0f - static_cast<float>(std::pow(static_cast<double>(hp.beta1), step)),
                        1.0f - static_cast<float>(std::pow(static_cast<double>(hp.beta2), step)),
                        grad_scale};
  for (std::size_t first = 0; first < tensors.size(); first += kMaxTensors) {
    TensorList list{};
    list.count = static_cast<int>(std::min<std::size_t>(kMaxTensors, tensors.size() - first));
    list.offset[0] = 0;
    for (int j = 0; j < list.count; ++j) {
      const AdamWTensor& x = tensors[first + j];
      list.param[j] = x.param;
      list.grad[j] = x.grad;
      list.m[j] = x.m;
      list.v[j] = x.v;
      list.param_bf16[j] = x.param_bf16;
      list.offset[j + 1] = list.offset[j] + x.n;
    }
    const std::int64_t total = list.offset[list.count];
    if (total == 0) continue;
    const int blocks = static_cast<int>(std::min<std::int64_t>(
        device::ceil_div(total, kThreads), kMaxBlocks));
    adamw_kernel<<<blocks, kThreads, 0, stream>>>(list, k);
    CUDA_CHECK_LAUNCH();
  }
}

void sum_of_squares(double* result, double* scratch, const float* x, std::int64_t n,
                    cudaStream_t stream) {
  constexpr const char* kName = "sum_of_squares";
  detail::require_tensor(kName, "result", result);
  detail::require_tensor(kName, "scratch", scratch);
  detail::require_non_negative(kName, "n", n);
  if (n > 0) detail::require_tensor(kName, "x", x);
  if (n == 0) return;  // adds nothing
  sum_of_squares_partial_kernel<<<kSumBlocks, kThreads, 0, stream>>>(scratch, x, n);
  CUDA_CHECK_LAUNCH();
  sum_of_squares_final_kernel<<<1, 1, 0, stream>>>(result, scratch);
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::kernels::cuda
