// PinnedHostBuffer over registered fresh pages or cudaHostAlloc (see pinned_host_buffer.h).
#include "executor/cuda/pinned_host_buffer.h"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>
#include <utility>

#include <cuda_runtime.h>

#include "cost_model/specs/errors.h"
#include "executor/cuda/system_error.h"
#include "executor/memory/host_pages.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {

namespace {

// On every thread (kernels/cpu/elementwise.h): tens of GiB of offloaded state took seconds
// on one.
void zero_on_every_thread(void* data, std::int64_t bytes) {
  const std::int64_t floats = bytes / static_cast<std::int64_t>(sizeof(float));
  if (floats > 0) kernels::cpu::zero(static_cast<float*>(data), floats);
  const std::int64_t tail = bytes - floats * static_cast<std::int64_t>(sizeof(float));
  std::memset(static_cast<char*>(data) + (bytes - tail), 0, static_cast<std::size_t>(tail));
}

// The error of a failed pinning: OutOfMemory when the runtime says out of memory (the
// reservation already counts the bytes), SystemError otherwise.
[[noreturn]] void throw_pinning_error(cudaError_t status, const char* call,
                                      AccountingAllocator& accounting, std::int64_t bytes,
                                      const std::string& tag) {
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    const TierUsage usage = accounting.usage(MemoryTier::kHost);
    const std::int64_t budget_free = usage.budget_bytes - (usage.current_bytes - bytes);
    throw OutOfMemory("host", bytes, budget_free,
                      fmt::format("out of host memory: {} of {} bytes for '{}' failed (the OS "
                                  "would not pin them; {} bytes free in the host budget)",
                                  call, bytes, tag, budget_free));
  }
  as_system_error([&] { kernels::cuda::detail::throw_cuda_error(status, call, __FILE__, __LINE__); });
  throw std::logic_error("unreachable");  // as_system_error rethrows
}

// Fresh pages faulted in on every thread, then registered; empty where this runtime cannot
// register host memory (the caller falls back to cudaHostAlloc).
HostPages register_fresh_pages(AccountingAllocator& accounting, std::int64_t bytes,
                               const std::string& tag) {
  HostPages pages(bytes, /*huge=*/true);
  populate_on_every_thread(pages.data(), pages.mapped());
  // Default flags: under unified addressing (every GPU strata runs on) the pages are
  // mapped and portable, as cudaHostAlloc's are.
  const cudaError_t status = cudaHostRegister(pages.data(), static_cast<std::size_t>(pages.mapped()),
                                              cudaHostRegisterDefault);
  if (status == cudaSuccess) return pages;
  if (status == cudaErrorNotSupported) {
    (void)cudaGetLastError();
    return {};
  }
  throw_pinning_error(status, "cudaHostRegister", accounting, bytes, tag);
}

}  // namespace

PinnedHostBuffer PinnedHostBuffer::allocate(AccountingAllocator& accounting, std::int64_t bytes,
                                            const std::string& tag, Fill fill) {
  if (bytes < 0) {
    throw std::invalid_argument(
        fmt::format("PinnedHostBuffer::allocate '{}': {} bytes is negative", tag, bytes));
  }
  Reservation reservation = accounting.reserve(MemoryTier::kHost, bytes, tag);
  if (bytes == 0) return PinnedHostBuffer(nullptr, {}, std::move(reservation));
  if (bytes >= kRegisteredBytes) {
    // Registered pages are the kernel's zero pages: zeroed whatever `fill` asks.
    HostPages pages = register_fresh_pages(accounting, bytes, tag);
    void* data = pages.data();
    if (data != nullptr) return PinnedHostBuffer(data, std::move(pages), std::move(reservation));
  }
  void* data = nullptr;
  const cudaError_t status =
      cudaHostAlloc(&data, static_cast<std::size_t>(bytes), cudaHostAllocDefault);
  if (status != cudaSuccess) {
    throw_pinning_error(status, "cudaHostAlloc", accounting, bytes, tag);
  }
  if (fill == Fill::kZero) zero_on_every_thread(data, bytes);
  return PinnedHostBuffer(data, {}, std::move(reservation));
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      pages_(std::move(other.pages_)),
      reservation_(std::move(other.reservation_)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    pages_ = std::move(other.pages_);
    reservation_ = std::move(other.reservation_);
  }
  return *this;
}

void PinnedHostBuffer::reset() noexcept {
  if (!pages_.empty()) {
    CUDA_CHECK_NOEXCEPT(cudaHostUnregister(pages_.data()));
    pages_.reset();
  } else if (data_ != nullptr) {
    CUDA_CHECK_NOEXCEPT(cudaFreeHost(data_));
  }
  data_ = nullptr;
  reservation_.release();
}

}  // namespace strata::cuda
