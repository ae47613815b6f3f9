// RAII, move-only owners for the CUDA objects the kernels and the executor hold: device
// memory (DeviceBuffer), streams (Stream), events (Event) and a cuBLASLt handle with its
// workspace (CublasLtHandle). Each constructor throws CudaError when the call fails; each
// destructor releases with a *_CHECK_NOEXCEPT (abort on failure). A default-constructed or
// moved-from owner holds nothing and is safe to destroy.
// It deliberately has no pooling or caching allocator (the executor's accounting allocator
// budgets memory above this) and no device selection (cudaSetDevice is the caller's).
#pragma once

#include <cstddef>

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace strata::kernels::cuda {

// cudaMalloc'd bytes. Not zeroed.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);  // bytes == 0 holds nothing
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }

  // Synchronous copies of `bytes` (at most bytes()); throw CudaError on failure.
  void copy_from_host(const void* src, std::size_t bytes);
  void copy_to_host(void* dst, std::size_t bytes) const;

 private:
  void reset() noexcept;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// A non-blocking stream (cudaStreamNonBlocking: no implicit sync with the legacy stream).
class Stream {
 public:
  Stream() = default;  // holds nothing; get() is then the legacy default stream (0)
  static Stream create();
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  void synchronize() const;  // throws CudaError, surfacing asynchronous kernel faults

 private:
  explicit Stream(cudaStream_t s) : stream_(s) {}
  cudaStream_t stream_ = nullptr;
};

// An event; timing enabled unless created with timing = false (cross-stream ordering only).
class Event {
 public:
  Event() = default;
  static Event create(bool timing = true);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream) const;
  void synchronize() const;
  // Milliseconds from `start` to this event (both recorded and complete).
  float elapsed_ms_since(const Event& start) const;

 private:
  explicit Event(cudaEvent_t e) : event_(e) {}
  cudaEvent_t event_ = nullptr;
};

// A cuBLASLt handle plus the workspace its matmuls may use, and a small scratch of ours for
// the matmul launchers' own reductions (the bias gradient's partial sums). Both are
// stream-ordered: one handle serves one stream at a time. 32 MiB of workspace is the size
// NVIDIA recommends for Hopper; with the 4 MiB scratch it is what the memory model budgets
// (cost_model/memory/memory_model.cc, kCudaWorkspaceBytes).
class CublasLtHandle {
 public:
  static constexpr std::size_t kDefaultWorkspaceBytes = std::size_t{32} << 20;
  static constexpr std::size_t kReductionScratchBytes = std::size_t{4} << 20;

  CublasLtHandle() = default;  // holds nothing; launchers reject it with KernelError
  static CublasLtHandle create(std::size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~CublasLtHandle();
  CublasLtHandle(CublasLtHandle&& other) noexcept;
  CublasLtHandle& operator=(CublasLtHandle&& other) noexcept;
  CublasLtHandle(const CublasLtHandle&) = delete;
  CublasLtHandle& operator=(const CublasLtHandle&) = delete;

  cublasLtHandle_t get() const { return handle_; }
  void* workspace() const { return workspace_.get(); }
  std::size_t workspace_bytes() const { return workspace_.bytes(); }
  float* reduction_scratch() const { return reduction_scratch_.as<float>(); }
  std::size_t reduction_scratch_floats() const { return reduction_scratch_.bytes() / sizeof(float); }
  explicit operator bool() const { return handle_ != nullptr; }

 private:
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  DeviceBuffer reduction_scratch_;
};

}  // namespace strata::kernels::cuda
