// PinnedHostBuffer over cudaHostAlloc / cudaFreeHost.
#include "executor/cuda/pinned_host_buffer.h"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>
#include <utility>

#include <cuda_runtime.h>

#include "cost_model/errors.h"
#include "executor/cuda/system_error.h"
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

}  // namespace

PinnedHostBuffer PinnedHostBuffer::allocate(AccountingAllocator& accounting, std::int64_t bytes,
                                            const std::string& tag, Fill fill) {
  if (bytes < 0) {
    throw std::invalid_argument(
        fmt::format("PinnedHostBuffer::allocate '{}': {} bytes is negative", tag, bytes));
  }
  Reservation reservation = accounting.reserve(MemoryTier::kHost, bytes, tag);
  if (bytes == 0) return PinnedHostBuffer(nullptr, std::move(reservation));
  void* data = nullptr;
  const cudaError_t status =
      cudaHostAlloc(&data, static_cast<std::size_t>(bytes), cudaHostAllocDefault);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    const TierUsage usage = accounting.usage(MemoryTier::kHost);
    // The reservation above already counts these bytes; free = what the budget had left.
    const std::int64_t budget_free = usage.budget_bytes - (usage.current_bytes - bytes);
    throw OutOfMemory("host", bytes, budget_free,
                      fmt::format("out of host memory: cudaHostAlloc of {} bytes for '{}' failed "
                                  "(the OS would not pin them; {} bytes free in the host budget)",
                                  bytes, tag, budget_free));
  }
  if (status != cudaSuccess) {
    as_system_error([&] {
      kernels::cuda::detail::throw_cuda_error(status, "cudaHostAlloc(&data, bytes, 0)", __FILE__,
                                              __LINE__);
    });
  }
  if (fill == Fill::kZero) zero_on_every_thread(data, bytes);
  return PinnedHostBuffer(data, std::move(reservation));
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), reservation_(std::move(other.reservation_)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    reservation_ = std::move(other.reservation_);
  }
  return *this;
}

void PinnedHostBuffer::reset() noexcept {
  if (data_ != nullptr) CUDA_CHECK_NOEXCEPT(cudaFreeHost(data_));
  data_ = nullptr;
  reservation_.release();
}

}  // namespace strata::cuda
