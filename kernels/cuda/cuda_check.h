// Checked CUDA / cuBLAS / NCCL calls: CUDA_CHECK, CUBLAS_CHECK and NCCL_CHECK capture the call
// text, file and line and throw CudaError; the *_CHECK_NOEXCEPT twins log to stderr and abort,
// for destructors only (a destructor must not throw, and a failed free means the device state
// is already broken). Also cuda_device_available(), which answers "no" instead of throwing
// on a machine without a driver or a GPU.
// It deliberately does not depend on cost_model/specs/errors.h (kernels sit below cost_model); a
// caller that wants SystemError catches CudaError and rethrows.
#pragma once

#include <stdexcept>
#include <string>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cublaslt_library.h"

namespace strata::kernels::cuda {

// A failed CUDA runtime, cuBLAS(Lt) or NCCL call. what() names the call as written, the
// library's error name and string, and file:line.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

[[noreturn]] void throw_cuda_error(cudaError_t code, const char* call, const char* file,
                                   int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t code, const char* call, const char* file,
                                     int line);
// NCCL's status is passed as an int with its string so this header needs no nccl.h.
[[noreturn]] void throw_nccl_error(int code, const char* error_string, const char* call,
                                   const char* file, int line);
[[noreturn]] void abort_on_error(const char* library, int code, const char* error_string,
                                 const char* call, const char* file, int line) noexcept;

}  // namespace detail

// True when the CUDA runtime sees at least one usable device. Returns false (never throws)
// when the driver is missing or too old, or no GPU is present; clears the sticky error the
// failed query leaves behind.
bool cuda_device_available() noexcept;

// Why cuda_device_available() is false, for skip messages ("no CUDA device: ...").
std::string cuda_unavailable_reason();

}  // namespace strata::kernels::cuda

#define CUDA_CHECK(call)                                                                \
  do {                                                                                 \
    const cudaError_t strata_cuda_status_ = (call);                                    \
    if (strata_cuda_status_ != cudaSuccess) {                                          \
      ::strata::kernels::cuda::detail::throw_cuda_error(strata_cuda_status_, #call,    \
                                                        __FILE__, __LINE__);           \
    }                                                                                  \
  } while (0)

#define CUBLAS_CHECK(call)                                                              \
  do {                                                                                 \
    const cublasStatus_t strata_cublas_status_ = (call);                               \
    if (strata_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                              \
      ::strata::kernels::cuda::detail::throw_cublas_error(strata_cublas_status_, #call, \
                                                          __FILE__, __LINE__);         \
    }                                                                                  \
  } while (0)

// Needs <nccl.h> at the point of use.
#define NCCL_CHECK(call)                                                                \
  do {                                                                                 \
    const ncclResult_t strata_nccl_status_ = (call);                                   \
    if (strata_nccl_status_ != ncclSuccess) {                                          \
      ::strata::kernels::cuda::detail::throw_nccl_error(                               \
          static_cast<int>(strata_nccl_status_), ncclGetErrorString(strata_nccl_status_), \
          #call, __FILE__, __LINE__);                                                  \
    }                                                                                  \
  } while (0)

// Checks the last kernel launch (bad configuration, missing image for this GPU) without
// synchronising: asynchronous faults surface at the next checked call on the stream.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUDA_CHECK_NOEXCEPT(call)                                                       \
  do {                                                                                 \
    const cudaError_t strata_cuda_status_ = (call);                                    \
    if (strata_cuda_status_ != cudaSuccess) {                                          \
      ::strata::kernels::cuda::detail::abort_on_error(                                 \
          "CUDA", static_cast<int>(strata_cuda_status_),                               \
          cudaGetErrorString(strata_cuda_status_), #call, __FILE__, __LINE__);         \
    }                                                                                  \
  } while (0)

#define CUBLAS_CHECK_NOEXCEPT(call)                                                     \
  do {                                                                                 \
    const cublasStatus_t strata_cublas_status_ = (call);                               \
    if (strata_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                              \
      ::strata::kernels::cuda::detail::abort_on_error(                                 \
          "cuBLAS", static_cast<int>(strata_cublas_status_),                           \
          ::strata::kernels::cuda::cublaslt().GetStatusString(strata_cublas_status_),  \
          #call, __FILE__, __LINE__);                                                  \
    }                                                                                  \
  } while (0)
