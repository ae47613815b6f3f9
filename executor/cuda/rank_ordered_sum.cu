// rank_ordered_sum: one thread per output element, a grid-stride loop, and the ranks' rows
// added strictly left to right (plain adds: there is no multiply for nvcc to contract into an
// FMA, so the order written is the order executed). bf16 is handled as raw 16-bit words with
// the conversions written out, so the rounding is bit-for-bit the host's (kernels/bf16.h),
// NaNs included, rather than whatever __float2bfloat16 does with a NaN payload.
#include "executor/cuda/rank_ordered_sum.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {
namespace {

// ---- kernels ----

// How one element type is accumulated: T in, Acc summed, T out (rounded once).
template <class T>
struct Plain {
  using Acc = T;
  __device__ static Acc load(T x) { return x; }
  __device__ static T store(Acc a) { return a; }
};

struct Bf16InFp32 {
  using Acc = float;
  __device__ static float load(std::uint16_t bits) {
    return __uint_as_float(static_cast<unsigned int>(bits) << 16);
  }
  // Round to nearest, ties to even; NaN stays a quiet NaN (float_to_bf16's formula).
  __device__ static std::uint16_t store(float f) {
    const unsigned int u = __float_as_uint(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
      return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
    }
    const unsigned int rounding = 0x7fffu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>((u + rounding) >> 16);
  }
};

template <class T, class Add>
__global__ void rank_ordered_sum_kernel(const T* __restrict__ copies, T* __restrict__ out,
                                        std::int64_t m, int ranks) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m;
       i += stride) {
    typename Add::Acc sum = Add::load(copies[i]);
    for (int r = 1; r < ranks; ++r) sum += Add::load(copies[static_cast<std::int64_t>(r) * m + i]);
    out[i] = Add::store(sum);
  }
}

// ---- launchers ----

template <class T, class Add>
void launch(const T* copies, T* out, std::int64_t m, int ranks, cudaStream_t stream) {
  if (m == 0) return;
  constexpr int kThreads = 256;
  // Enough blocks to fill an H100 (132 SMs x 8 resident blocks) and no more: the loop strides.
  const std::int64_t wanted = (m + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(std::min<std::int64_t>(wanted, 132 * 8));
  rank_ordered_sum_kernel<T, Add><<<blocks, kThreads, 0, stream>>>(copies, out, m, ranks);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rank_ordered_sum(const float* copies, float* out, std::int64_t m, int ranks,
                      cudaStream_t stream) {
  launch<float, Plain<float>>(copies, out, m, ranks, stream);
}

void rank_ordered_sum(const double* copies, double* out, std::int64_t m, int ranks,
                      cudaStream_t stream) {
  launch<double, Plain<double>>(copies, out, m, ranks, stream);
}

void rank_ordered_sum(const Bf16Bits* copies, Bf16Bits* out, std::int64_t m, int ranks,
                      cudaStream_t stream) {
  static_assert(sizeof(Bf16Bits) == sizeof(std::uint16_t), "bf16 is its 16 raw bits");
  launch<std::uint16_t, Bf16InFp32>(reinterpret_cast<const std::uint16_t*>(copies),
                                    reinterpret_cast<std::uint16_t*>(out), m, ranks, stream);
}

}  // namespace strata::cuda
