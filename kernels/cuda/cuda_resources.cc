// The RAII owners of cuda_resources.h. Plain C++ over the runtime and cuBLASLt APIs.
#include "kernels/cuda/cuda_resources.h"

#include <utility>

#include <fmt/format.h>

#include "kernels/cuda/cuda_check.h"

namespace strata::kernels::cuda {

// ---- DeviceBuffer ----

DeviceBuffer::DeviceBuffer(std::size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  bytes_ = bytes;
}

DeviceBuffer::~DeviceBuffer() { reset(); }

void DeviceBuffer::reset() noexcept {
  if (ptr_ != nullptr) CUDA_CHECK_NOEXCEPT(cudaFree(ptr_));
  ptr_ = nullptr;
  bytes_ = 0;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::copy_from_host(const void* src, std::size_t bytes) {
  if (bytes > bytes_) {
    throw CudaError(fmt::format("DeviceBuffer::copy_from_host: {} bytes into a buffer of {}",
                                bytes, bytes_));
  }
  if (bytes > 0) CUDA_CHECK(cudaMemcpy(ptr_, src, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::copy_to_host(void* dst, std::size_t bytes) const {
  if (bytes > bytes_) {
    throw CudaError(fmt::format("DeviceBuffer::copy_to_host: {} bytes from a buffer of {}",
                                bytes, bytes_));
  }
  if (bytes > 0) CUDA_CHECK(cudaMemcpy(dst, ptr_, bytes, cudaMemcpyDeviceToHost));
}

// ---- Stream ----

Stream Stream::create() {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}

Stream::~Stream() {
  if (stream_ != nullptr) CUDA_CHECK_NOEXCEPT(cudaStreamDestroy(stream_));
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) CUDA_CHECK_NOEXCEPT(cudaStreamDestroy(stream_));
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

// ---- Event ----

Event Event::create(bool timing) {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return Event(e);
}

Event::~Event() {
  if (event_ != nullptr) CUDA_CHECK_NOEXCEPT(cudaEventDestroy(event_));
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) CUDA_CHECK_NOEXCEPT(cudaEventDestroy(event_));
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::record(cudaStream_t stream) const { CUDA_CHECK(cudaEventRecord(event_, stream)); }

void Event::synchronize() const { CUDA_CHECK(cudaEventSynchronize(event_)); }

float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

// ---- CublasLtHandle ----

CublasLtHandle CublasLtHandle::create(std::size_t workspace_bytes) {
  CublasLtHandle h;
  h.workspace_ = DeviceBuffer(workspace_bytes);  // first: a failed create frees them
  h.reduction_scratch_ = DeviceBuffer(kReductionScratchBytes);
  CUBLAS_CHECK(cublaslt().Create(&h.handle_));
  return h;
}

CublasLtHandle::~CublasLtHandle() {
  if (handle_ != nullptr) CUBLAS_CHECK_NOEXCEPT(cublaslt().Destroy(handle_));
}

CublasLtHandle::CublasLtHandle(CublasLtHandle&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), workspace_(std::move(other.workspace_)),
      reduction_scratch_(std::move(other.reduction_scratch_)) {}

CublasLtHandle& CublasLtHandle::operator=(CublasLtHandle&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) CUBLAS_CHECK_NOEXCEPT(cublaslt().Destroy(handle_));
    handle_ = std::exchange(other.handle_, nullptr);
    workspace_ = std::move(other.workspace_);
    reduction_scratch_ = std::move(other.reduction_scratch_);
  }
  return *this;
}

}  // namespace strata::kernels::cuda
