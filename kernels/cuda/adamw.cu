// Multi-tensor AdamW and sum of squares (see adamw.h). A launch's tensor list travels in one
// __grid_constant__ kernel parameter; each block updates one tile of one tensor
// (adamw_tiles.h), its loads for kAdamWPerThread elements of each array issued before any
// arithmetic so that enough bytes are in flight to run at the memory's bandwidth. Every
// element's update depends on that element alone, so results do not depend on the launch
// shape.
#include "kernels/cuda/adamw.h"

#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxTensors = kAdamWTensorsPerLaunch;

struct TensorList {
  float* param[kMaxTensors];
  const float* grad[kMaxTensors];
  float* m[kMaxTensors];
  float* v[kMaxTensors];
  bf16* param_bf16[kMaxTensors];
  std::int64_t n[kMaxTensors];
  std::int64_t tile_begin[kMaxTensors];  // tiles before tensor k in this launch
  float weight_decay[kMaxTensors];
  int count;
};

struct StepConstants {
  float lr, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, bias_correction1,
      bias_correction2, grad_scale;
};
// Volta and later take up to 32,764 bytes of kernel parameters (CUDA 12.1 and later).
static_assert(sizeof(TensorList) + sizeof(StepConstants) <= 32764,
              "adamw_kernel's parameters must stay under 32,764 bytes");
static_assert(kAdamWThreads == kThreads, "adamw_tiles.h's block size is the kernel's");

// ---------------------------------------------------------------------------------------
// Kernels

// One element's AdamW step, each operation rounded once in the CPU twin's order (the
// intrinsics are never contracted into FMAs; division and square root are IEEE's).
__device__ __forceinline__ void adamw_step_element(float& p, float& m, float& v, float grad,
                                                   float weight_decay,
                                                   const StepConstants& k) {
  const float g = __fmul_rn(grad, k.grad_scale);
  m = __fadd_rn(__fmul_rn(k.beta1, m), __fmul_rn(k.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(k.beta2, v), __fmul_rn(__fmul_rn(k.one_minus_beta2, g), g));
  const float mhat = __fdiv_rn(m, k.bias_correction1);
  const float vhat = __fdiv_rn(v, k.bias_correction2);
  const float update = __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), k.eps)),
                                 __fmul_rn(weight_decay, p));
  p = __fsub_rn(p, __fmul_rn(k.lr, update));
}

__global__ void __launch_bounds__(kThreads)
    adamw_kernel(const __grid_constant__ TensorList list, const StepConstants launch_k,
                 const AdamWStepValues* __restrict__ values) {
  // A captured step's values are read from memory as the kernel runs, not baked into it.
  StepConstants k = launch_k;
  if (values != nullptr) {
    k.grad_scale = values->grad_scale;
    k.lr = values->lr;
    k.bias_correction1 = values->bias_correction1;
    k.bias_correction2 = values->bias_correction2;
  }
  const std::int64_t tile = blockIdx.x;
  const int t = adamw_tile_tensor(list.tile_begin, list.count, tile);
  const std::int64_t n = list.n[t];
  float* __restrict__ param = list.param[t];
  const float* __restrict__ grad = list.grad[t];
  float* __restrict__ m = list.m[t];
  float* __restrict__ v = list.v[t];
  bf16* __restrict__ param_bf16 = list.param_bf16[t];
  const float weight_decay = list.weight_decay[t];
  std::int64_t at[kAdamWPerThread];
  float p[kAdamWPerThread], g[kAdamWPerThread], mi[kAdamWPerThread], vi[kAdamWPerThread];
#pragma unroll
  for (int r = 0; r < kAdamWPerThread; ++r) {
    at[r] = adamw_tile_element(list.tile_begin, t, tile, static_cast<int>(threadIdx.x), r);
    if (at[r] < n) {
      p[r] = param[at[r]];
      g[r] = grad[at[r]];
      mi[r] = m[at[r]];
      vi[r] = v[at[r]];
    }
  }
#pragma unroll
  for (int r = 0; r < kAdamWPerThread; ++r) {
    if (at[r] >= n) continue;
    adamw_step_element(p[r], mi[r], vi[r], g[r], weight_decay, k);
    param[at[r]] = p[r];
    m[at[r]] = mi[r];
    v[at[r]] = vi[r];
    if (param_bf16 != nullptr) param_bf16[at[r]] = device::to_bf16(p[r]);
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

// *total += *part: a group's sum into the global one.
__global__ void add_kernel(double* total, const double* part) { *total += *part; }

// The clip factor of *sum, as cpu::clip_scale computes it (IEEE double sqrt and divide,
// std::min's comparison, one rounding to float).
__global__ void clip_scale_kernel(float* grad_scale, const double* sum, float max_norm) {
  if (max_norm <= 0.0f) {
    *grad_scale = 1.0f;
    return;
  }
  const double ratio = static_cast<double>(max_norm) / (sqrt(*sum) + 1e-6);
  *grad_scale = static_cast<float>(ratio < 1.0 ? ratio : 1.0);
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

void check_tensors(const char* kernel, const std::vector<AdamWTensor>& tensors) {
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const AdamWTensor& x = tensors[t];
    if (x.n < 0) {
      throw KernelError(fmt::format("{}: tensors[{}].n = {}; expected >= 0", kernel, t, x.n));
    }
    if (x.n > 0 && (x.param == nullptr || x.grad == nullptr || x.m == nullptr ||
                    x.v == nullptr)) {
      throw KernelError(fmt::format("{}: tensors[{}] has a null param, grad, m or v; expected "
                                    "buffers of n = {} floats", kernel, t, x.n));
    }
  }
}

}  // namespace

int adamw_launches(const std::vector<AdamWTensor>& tensors) {
  const auto filled = std::count_if(tensors.begin(), tensors.end(),
                                    [](const AdamWTensor& x) { return x.n > 0; });
  return static_cast<int>((filled + kMaxTensors - 1) / kMaxTensors);
}

namespace {
void launch_adamw(const char* kName, const std::vector<AdamWTensor>& tensors,
                  const AdamWParams& hp, int step, float grad_scale,
                  const AdamWStepValues* values, cudaStream_t stream);
}  // namespace

void adamw_update(const std::vector<AdamWTensor>& tensors, const AdamWParams& hp, int step,
                  float grad_scale, cudaStream_t stream) {
  constexpr const char* kName = "adamw_update";
  check_hyper(kName, hp, step);
  if (!std::isfinite(grad_scale) || grad_scale <= 0.0f) {
    throw KernelError(fmt::format("{}: grad_scale = {}; expected finite and > 0", kName,
                                  grad_scale));
  }
  check_tensors(kName, tensors);
  launch_adamw(kName, tensors, hp, step, grad_scale, nullptr, stream);
}

void adamw_update_from_device(const std::vector<AdamWTensor>& tensors, const AdamWParams& hp,
                              const AdamWStepValues* values, cudaStream_t stream) {
  constexpr const char* kName = "adamw_update_from_device";
  check_hyper(kName, hp, /*step=*/1);  // the betas and eps; the step's values are read later
  detail::require_tensor(kName, "values", values);
  check_tensors(kName, tensors);
  launch_adamw(kName, tensors, hp, 1, 1.0f, values, stream);
}

void sum_of_squares_groups(double* sum, const std::vector<std::vector<SquaredSpan>>& groups,
                           double* scratch, cudaStream_t stream) {
  constexpr const char* kName = "sum_of_squares_groups";
  detail::require_tensor(kName, "sum", sum);
  detail::require_tensor(kName, "scratch", scratch);
  for (const auto& group : groups) {
    for (const SquaredSpan& s : group) {
      detail::require_non_negative(kName, "n", s.n);
      if (s.n > 0) detail::require_tensor(kName, "x", s.x);
    }
  }
  double* part = scratch;
  CUDA_CHECK(cudaMemsetAsync(sum, 0, sizeof(double), stream));
  for (const auto& group : groups) {
    CUDA_CHECK(cudaMemsetAsync(part, 0, sizeof(double), stream));
    for (const SquaredSpan& s : group) sum_of_squares(part, scratch + 1, s.x, s.n, stream);
    add_kernel<<<1, 1, 0, stream>>>(sum, part);
    CUDA_CHECK_LAUNCH();
  }
}

void clip_scale_from_sum(float* grad_scale, const double* sum, float max_norm,
                         cudaStream_t stream) {
  constexpr const char* kName = "clip_scale_from_sum";
  detail::require_tensor(kName, "grad_scale", grad_scale);
  detail::require_tensor(kName, "sum", sum);
  clip_scale_kernel<<<1, 1, 0, stream>>>(grad_scale, sum, max_norm);
  CUDA_CHECK_LAUNCH();
}

namespace {
void launch_adamw(const char* kName, const std::vector<AdamWTensor>& tensors,
                  const AdamWParams& hp, int step, float grad_scale,
                  const AdamWStepValues* values, cudaStream_t stream) {
  // Same per-step constants as the CPU twin (pow in double, rounded once).
  const StepConstants k{hp.lr,
                        hp.beta1,
                        1.0f - hp.beta1,
                        hp.beta2,
                        1.0f - hp.beta2,
                        hp.eps,
                        cpu::adamw_bias_correction(hp.beta1, step),
                        cpu::adamw_bias_correction(hp.beta2, step),
                        grad_scale};
  // The non-empty tensors, kMaxTensors a launch (empty ones would give a tile-less entry).
  TensorList list{};
  std::int64_t tiles = 0;
  const auto launch = [&] {
    if (list.count == 0) return;
    if (tiles > std::int64_t{0x7fffffff}) {
      throw KernelError(fmt::format("{}: {} tiles of {} elements in one launch; expected at "
                                    "most 2^31 - 1 blocks", kName, tiles, kAdamWTile));
    }
    adamw_kernel<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(list, k, values);
    CUDA_CHECK_LAUNCH();
    list = TensorList{};
    tiles = 0;
  };
  for (const AdamWTensor& x : tensors) {
    if (x.n == 0) continue;
    const int j = list.count++;
    list.param[j] = x.param;
    list.grad[j] = x.grad;
    list.m[j] = x.m;
    list.v[j] = x.v;
    list.param_bf16[j] = x.param_bf16;
    list.n[j] = x.n;
    list.tile_begin[j] = tiles;
    list.weight_decay[j] = x.decayed ? hp.weight_decay : 0.0f;
    tiles += adamw_tiles(x.n);
    if (list.count == kMaxTensors) launch();
  }
  launch();
}
}  // namespace

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
