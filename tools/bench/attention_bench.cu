// strata_attention_bench: times the tensor-core causal attention (kernels/cuda/attention.h)
// forward and backward on the GPT-2-sized shapes and prints the median time and TFLOP/s.
// FLOPs follow FlashAttention's accounting: causal forward = 4 B NH T^2 HS / 2 (Q K^T and
// P V, half of the T x T square masked), backward = 2.5 x forward. The backward time includes
// its rowsum pass; the dqkv zeroing between repetitions is outside the timed region.
// It deliberately checks only that every output element is finite; correctness against the
// CPU reference lives in tests/kernels/cuda_attention_test.cc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_resources.h"

namespace {

using strata::kernels::cuda::bf16;
using strata::kernels::cuda::DeviceBuffer;

constexpr int kWarmups = 3;
constexpr int kReps = 20;

struct Shape {
  int B, T, NH, HS;
};

// Uniform [-1, 1) bf16 bit patterns from a fixed-seed 32-bit LCG (deterministic inputs).
std::vector<std::uint16_t> random_bf16(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint16_t> bits(n);
  std::uint32_t state = seed;
  for (auto& b : bits) {
    state = state * 1664525u + 1013904223u;
    const float x = static_cast<float>(state >> 8) / 8388608.0f - 1.0f;  // 2^23
    std::uint32_t u = 0;
    std::memcpy(&u, &x, sizeof(u));
    b = static_cast<std::uint16_t>(u >> 16);  // truncation: any bf16 in range will do
  }
  return bits;
}

float bf16_to_float(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float x = 0.0f;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

bool all_finite_bf16(const DeviceBuffer& buf, std::size_t n) {
  std::vector<std::uint16_t> host(n);
  buf.copy_to_host(host.data(), n * sizeof(std::uint16_t));
  return std::all_of(host.begin(), host.end(),
                     [](std::uint16_t b) { return std::isfinite(bf16_to_float(b)); });
}

bool all_finite_f32(const DeviceBuffer& buf, std::size_t n) {
  std::vector<float> host(n);
  buf.copy_to_host(host.data(), n * sizeof(float));
  return std::all_of(host.begin(), host.end(), [](float x) { return std::isfinite(x); });
}

// Median over kReps of the time (ms) between events around `body`, after kWarmups runs;
// `before` runs untimed ahead of each repetition.
template <class Before, class Body>
float median_ms(cudaStream_t stream, Before before, Body body) {
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < kWarmups; ++i) {
    before();
    body();
  }
  std::vector<float> times;
  for (int i = 0; i < kReps; ++i) {
    before();
    CUDA_CHECK(cudaEventRecord(start, stream));
    body();
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return 0.5f * (times[kReps / 2 - 1] + times[kReps / 2]);
}

bool run_shape(const Shape& s, cudaStream_t stream) {
  namespace k = strata::kernels::cuda;
  const int C = s.NH * s.HS;
  const std::size_t n_qkv = static_cast<std::size_t>(s.B) * s.T * 3 * C;
  const std::size_t n_out = static_cast<std::size_t>(s.B) * s.T * C;
  const std::size_t n_lse = static_cast<std::size_t>(s.B) * s.NH * s.T;
  DeviceBuffer qkv(n_qkv * sizeof(bf16)), dqkv(n_qkv * sizeof(bf16)), out(n_out * sizeof(bf16)),
      dout(n_out * sizeof(bf16)), lse(n_lse * sizeof(float)),
      scratch(static_cast<std::size_t>(k::attention_backward_scratch_floats(s.B, s.T, s.NH)) *
              sizeof(float));
  const auto qkv_host = random_bf16(n_qkv, 1);
  const auto dout_host = random_bf16(n_out, 2);
  qkv.copy_from_host(qkv_host.data(), n_qkv * sizeof(bf16));
  dout.copy_from_host(dout_host.data(), n_out * sizeof(bf16));

  const float fwd_ms = median_ms(stream, [] {}, [&] {
    k::attention_forward(out.as<bf16>(), lse.as<float>(), qkv.as<bf16>(), s.B, s.T, C, s.NH,
                         stream);
  });
  const float bwd_ms = median_ms(
      stream,
      [&] { CUDA_CHECK(cudaMemsetAsync(dqkv.get(), 0, dqkv.bytes(), stream)); },
      [&] {
        k::attention_backward(dqkv.as<bf16>(), scratch.as<float>(), dout.as<bf16>(),
                              qkv.as<bf16>(), out.as<bf16>(), lse.as<float>(), s.B, s.T, C,
                              s.NH, stream);
      });
  CUDA_CHECK(cudaStreamSynchronize(stream));

  const double fwd_flops = 4.0 * s.B * s.NH * static_cast<double>(s.T) * s.T * s.HS / 2.0;
  const double bwd_flops = 2.5 * fwd_flops;
  std::printf("B=%d T=%d NH=%d HS=%d  forward %.3f ms %.1f TFLOP/s  backward %.3f ms %.1f TFLOP/s\n",
              s.B, s.T, s.NH, s.HS, fwd_ms, fwd_flops / (fwd_ms * 1e-3) / 1e12, bwd_ms,
              bwd_flops / (bwd_ms * 1e-3) / 1e12);
  const bool finite = all_finite_bf16(out, n_out) && all_finite_f32(lse, n_lse) &&
                      all_finite_bf16(dqkv, n_qkv);
  std::printf("  finite outputs (out, lse, dqkv): %s\n", finite ? "yes" : "NO");
  return finite;
}

}  // namespace

int main() {
  try {
    if (!strata::kernels::cuda::cuda_device_available()) {
      std::fprintf(stderr, "strata_attention_bench: no CUDA device\n");
      return 1;
    }
    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreate(&stream));
    bool ok = true;
    // GPT-2 1.5B (25 heads of 64), GPT-2 small (12 x 64), and the HS = 128 path.
    for (const Shape& s : {Shape{8, 1024, 25, 64}, Shape{16, 1024, 12, 64}, Shape{8, 1024, 16, 128}})
      ok = run_shape(s, stream) && ok;
    CUDA_CHECK(cudaStreamDestroy(stream));
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata_attention_bench: %s\n", e.what());
    return 1;
  }
}
