// DevicePool: size-class free lists over cudaMalloc, accounted per requested byte.
#include "executor/cuda/device_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "cost_model/specs/errors.h"
#include "executor/cuda/system_error.h"
#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {

// ---- DeviceBlock ----

DeviceBlock::DeviceBlock(DeviceBlock&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      class_bytes_(std::exchange(other.class_bytes_, 0)),
      reservation_(std::move(other.reservation_)) {}

DeviceBlock& DeviceBlock::operator=(DeviceBlock&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = std::exchange(other.pool_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    class_bytes_ = std::exchange(other.class_bytes_, 0);
    reservation_ = std::move(other.reservation_);
  }
  return *this;
}

void DeviceBlock::reset() noexcept {
  if (data_ != nullptr && pool_ != nullptr) pool_->give_back(data_, class_bytes_);
  data_ = nullptr;
  pool_ = nullptr;
  class_bytes_ = 0;
  reservation_.release();  // after the block is cached: accounting never under-reports
}

// ---- DevicePool ----

DevicePool::DevicePool(AccountingAllocator& accounting, cudaStream_t stream)
    : accounting_(accounting), stream_(stream) {}

DevicePool::~DevicePool() {
  std::lock_guard<std::mutex> lock(mutex_);
  free_cached_locked();
}

DeviceBlock DevicePool::allocate(std::int64_t bytes, const std::string& tag) {
  return take(bytes, tag, /*zero=*/true);
}

DeviceBlock DevicePool::allocate_uninitialized(std::int64_t bytes, const std::string& tag) {
  return take(bytes, tag, /*zero=*/false);
}

DeviceBlock DevicePool::take(std::int64_t bytes, const std::string& tag, bool zero) {
  if (bytes < 0) {
    throw std::invalid_argument(
        fmt::format("DevicePool::allocate '{}': {} bytes is negative", tag, bytes));
  }
  // The budget first, exactly as the CPU backend's allocate(kDevice, ...) checks it.
  Reservation reservation = accounting_.reserve(MemoryTier::kDevice, bytes, tag);
  if (bytes == 0) return DeviceBlock(nullptr, nullptr, 0, std::move(reservation));
  const std::int64_t class_bytes = class_of(bytes);
  void* data = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    data = obtain_locked(class_bytes, bytes, tag);
  }
  DeviceBlock block(this, data, class_bytes, std::move(reservation));
  if (zero) {
    // Only the requested bytes: the padding of the class is never read by a correct caller.
    as_system_error([&] {
      CUDA_CHECK(cudaMemsetAsync(data, 0, static_cast<std::size_t>(bytes), stream_));
    });
  }
  return block;
}

void* DevicePool::obtain_locked(std::int64_t class_bytes, std::int64_t requested,
                                const std::string& tag) {
  auto it = free_lists_.find(class_bytes);
  if (it != free_lists_.end() && !it->second.empty()) {
    void* data = it->second.back();
    it->second.pop_back();
    stats_.cached_bytes -= class_bytes;
    ++stats_.live_blocks;
    ++stats_.reuses;
    return data;
  }
  void* data = nullptr;
  cudaError_t status = cudaMalloc(&data, static_cast<std::size_t>(class_bytes));
  if (status == cudaErrorMemoryAllocation && stats_.cached_bytes > 0) {
    (void)cudaGetLastError();  // clear the failed call's error before retrying
    free_cached_locked();
    status = cudaMalloc(&data, static_cast<std::size_t>(class_bytes));
  }
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    as_system_error([&] { CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes)); });
    throw OutOfMemory(
        "device", requested, static_cast<std::int64_t>(free_bytes),
        fmt::format("out of device memory: '{}' asked for {} bytes (class {} bytes), the driver "
                    "has {} bytes free of {}; this pool holds {} bytes (cache already freed)",
                    tag, requested, class_bytes, free_bytes, total_bytes,
                    stats_.reserved_bytes));
  }
  if (status != cudaSuccess) {
    as_system_error([&] {  // formats call, file, line and the runtime's text; SystemError
      kernels::cuda::detail::throw_cuda_error(status, "cudaMalloc(&data, class_bytes)", __FILE__,
                                              __LINE__);
    });
  }
  ++stats_.driver_allocations;
  ++stats_.live_blocks;
  stats_.reserved_bytes += class_bytes;
  if (stats_.reserved_bytes > stats_.peak_reserved_bytes) {
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
  }
  return data;
}

void DevicePool::give_back(void* data, std::int64_t class_bytes) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  --stats_.live_blocks;
  try {
    free_lists_[class_bytes].push_back(data);
    stats_.cached_bytes += class_bytes;
  } catch (...) {
    // No host memory for the free-list entry: return the block to the driver instead.
    CUDA_CHECK_NOEXCEPT(cudaFree(data));
    stats_.reserved_bytes -= class_bytes;
  }
}

void DevicePool::free_cached_locked() noexcept {
  for (auto& [class_bytes, blocks] : free_lists_) {
    for (void* data : blocks) {
      CUDA_CHECK_NOEXCEPT(cudaFree(data));
      stats_.reserved_bytes -= class_bytes;
      stats_.cached_bytes -= class_bytes;
    }
  }
  free_lists_.clear();
}

std::vector<FreeBlock> DevicePool::free_blocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<FreeBlock> blocks;
  for (const auto& [class_bytes, list] : free_lists_) {
    for (void* data : list) blocks.push_back({data, class_bytes});
  }
  std::sort(blocks.begin(), blocks.end());
  return blocks;
}

DevicePoolStats DevicePool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace strata::cuda
