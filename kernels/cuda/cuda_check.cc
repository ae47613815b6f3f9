// Error formatting behind CUDA_CHECK / CUBLAS_CHECK / NCCL_CHECK and the device probe.
// Plain C++ (no device code): compiled by the host compiler.
#include "kernels/cuda/cuda_check.h"

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

namespace strata::kernels::cuda {
namespace detail {

void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  throw CudaError(fmt::format("{} failed: {} ({}: {}) at {}:{}", call, cudaGetErrorName(code),
                              static_cast<int>(code), cudaGetErrorString(code), file, line));
}

void throw_cublas_error(cublasStatus_t code, const char* call, const char* file, int line) {
  throw CudaError(fmt::format("{} failed: {} ({}: {}) at {}:{}", call,
                              cublaslt().GetStatusName(code), static_cast<int>(code),
                              cublaslt().GetStatusString(code), file, line));
}

void throw_nccl_error(int code, const char* error_string, const char* call, const char* file,
                      int line) {
  throw CudaError(
      fmt::format("{} failed: NCCL error {} ({}) at {}:{}", call, code, error_string, file, line));
}

void abort_on_error(const char* library, int code, const char* error_string, const char* call,
                    const char* file, int line) noexcept {
  // Only reached from destructors, where throwing would terminate anyway; say why first.
  std::fprintf(stderr, "strata: %s call %s failed in a destructor: error %d (%s) at %s:%d\n",
               library, call, code, error_string, file, line);
  std::abort();
}

}  // namespace detail

namespace {

// The runtime's answer to "how many devices", with the error it gave (cudaSuccess when the
// count is meaningful).
cudaError_t probe_device_count(int* count) noexcept {
  *count = 0;
  const cudaError_t status = cudaGetDeviceCount(count);
  if (status != cudaSuccess) {
    // cudaGetDeviceCount's failures (no driver, insufficient driver) are not sticky, but
    // clear the last-error slot so the next checked launch does not report them.
    (void)cudaGetLastError();
  }
  return status;
}

}  // namespace

bool cuda_device_available() noexcept {
  int count = 0;
  return probe_device_count(&count) == cudaSuccess && count > 0;
}

std::string cuda_unavailable_reason() {
  int count = 0;
  const cudaError_t status = probe_device_count(&count);
  if (status != cudaSuccess) {
    return fmt::format("cudaGetDeviceCount failed: {} ({})", cudaGetErrorName(status),
                       cudaGetErrorString(status));
  }
  if (count == 0) return "cudaGetDeviceCount found 0 devices";
  return fmt::format("{} device(s) available", count);
}

}  // namespace strata::kernels::cuda
