// Helpers for the CUDA kernel tests: host-side bf16 rounding (round to nearest even, the
// rounding __float2bfloat16_rn does), device upload (complete before any kernel, on any
// stream, can read it) and download of fp32, bf16 and int32 vectors, buffers prefilled with
// NaN or garbage,
// and the fixture every GPU test derives from, which GTEST_SKIPs with the reason when no CUDA
// device is present (ctest then reports the test as skipped, never as passed).
// Deliberately no kernel knowledge; comparisons use tests/kernels/grad_check.h's all_close.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/common.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_resources.h"

namespace strata::kernels::cuda::testing {

// fp32 -> nearest bf16 (ties to even) -> fp32. NaN stays NaN.
inline float round_bf16(float x) {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float r = 0.0f;
  std::memcpy(&r, &u, sizeof(r));
  return r;
}

inline std::vector<float> rounded_bf16(std::vector<float> x) {
  for (float& v : x) v = round_bf16(v);
  return x;
}

// The upload is complete on the device before this returns, whatever stream reads it next.
// cudaMemcpy from pageable memory returns once the bytes are staged, not once they landed,
// and it runs on the legacy stream, which the fixture's non-blocking stream does not wait
// for: a kernel launched next could read the buffer before the copy wrote it (the H200's
// GQA test found exactly its prefill where the backward's result belonged, only while other
// processes used the GPU). Hence the device-wide synchronize.
template <class T>
DeviceBuffer to_device(const std::vector<T>& x) {
  DeviceBuffer buf(x.size() * sizeof(T));
  buf.copy_from_host(x.data(), x.size() * sizeof(T));
  CUDA_CHECK(cudaDeviceSynchronize());
  return buf;
}

// What a buffer holds before a kernel writes it: every byte 0xff (NaN in bf16 and fp32, so an
// element read before it is written, or never written, shows), garbage (bytes of a fixed
// pseudo-random stream: finite values of any size, some NaN and infinity, as reused pool
// memory holds), or nothing written at all (cudaMalloc's memory as it comes: what
// compute-sanitizer's initcheck needs to see a read of memory no one wrote; a prefill would
// count as the write).
enum class Prefill { kNaN, kGarbage, kUnwritten };

inline const char* to_string(Prefill p) {
  return p == Prefill::kNaN ? "NaN" : p == Prefill::kGarbage ? "Garbage" : "Unwritten";
}

inline DeviceBuffer prefilled(std::size_t bytes, Prefill fill) {
  if (fill == Prefill::kUnwritten) return DeviceBuffer(bytes);
  std::vector<std::uint8_t> host(bytes, 0xff);
  if (fill == Prefill::kGarbage) {
    std::uint32_t state = 0x9e3779b9u;
    for (std::uint8_t& b : host) {
      state = state * 1664525u + 1013904223u;  // Numerical Recipes' LCG
      b = static_cast<std::uint8_t>(state >> 24);
    }
  }
  return to_device(host);
}

// Uploads x rounded to bf16 (the upper 16 bits of each rounded float).
inline DeviceBuffer to_device_bf16(const std::vector<float>& x) {
  std::vector<std::uint16_t> bits(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float r = round_bf16(x[i]);
    std::uint32_t u = 0;
    std::memcpy(&u, &r, sizeof(u));
    bits[i] = static_cast<std::uint16_t>(u >> 16);
  }
  return to_device(bits);
}

template <class T>
std::vector<T> from_device(const DeviceBuffer& buf, std::size_t n) {
  std::vector<T> x(n);
  buf.copy_to_host(x.data(), n * sizeof(T));
  return x;
}

inline std::vector<float> from_device_bf16(const DeviceBuffer& buf, std::size_t n) {
  const auto bits = from_device<std::uint16_t>(buf, n);
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(bits[i]) << 16;
    std::memcpy(&x[i], &u, sizeof(u));
  }
  return x;
}

// GPU test fixture: skips without a device; owns a stream and a cuBLASLt handle.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) {
      GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
    }
    stream_ = Stream::create();
    lt_ = CublasLtHandle::create();
  }
  cudaStream_t stream() const { return stream_.get(); }
  const CublasLtHandle& lt() const { return lt_; }
  void sync() const { stream_.synchronize(); }

 private:
  Stream stream_;
  CublasLtHandle lt_;
};

}  // namespace strata::kernels::cuda::testing
