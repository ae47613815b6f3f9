// DevicePool: a caching allocator over cudaMalloc for one rank's device memory, with every
// live block accounted through the AccountingAllocator's device tier, so a GPU run's peak is
// measured exactly as the CPU backend's is (requested bytes per tag, budget = the cluster's
// device memory via TierBudgets::per_rank) and compares to the memory model to the byte.
//
// - Size classes: a request is rounded up to its class: powers of two from 512 B to 1 MiB,
//   then multiples of 2 MiB (big blocks rounded, as PyTorch's allocator rounds its large
//   segments). A freed block goes to its class's free list; the next request of the same
//   class reuses it without a CUDA call. No splitting or coalescing: one block is one
//   cudaMalloc, so fragmentation is bounded by the rounding (< 2x below 1 MiB, < 2 MiB above).
// - Memory goes back to the driver only when the pool is destroyed, or when a cudaMalloc
//   fails: then the pool frees its cached blocks and retries once before throwing
//   OutOfMemory{"device", requested, driver free bytes} (cudaFree in the steady state would
//   synchronise the device; after an allocation failure the choice is that or dying).
// - The accounting is checked first: a request over the device budget throws the
//   AccountingAllocator's OutOfMemory before any CUDA call.
// - Stream-ordered on ONE stream (the rank's compute stream, given at construction): a freed
//   block may be handed out again at once, which is safe for work on that stream. A block
//   used on another stream must be released only after that stream's use is ordered before
//   the compute stream (RankStreams::order) -- the caller's job, as with PyTorch's allocator.
// - allocate() zero-fills (cudaMemsetAsync on the pool's stream) like AccountingAllocator's
//   Buffer; allocate_uninitialized() skips it for buffers written before they are read.
// - Thread-safe (one mutex). The pool must outlive its blocks, and the AccountingAllocator
//   the pool. Device selection is the caller's: the pool allocates on the current device.
// Deliberately not here: cross-stream tracking, block splitting, cudaMallocAsync pools.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "executor/memory/accounting_allocator.h"
#include "executor/memory/pool_size_class.h"

namespace strata::cuda {

class DevicePool;

// A block of device memory from a DevicePool. Move-only; returns to the pool on destruction.
class DeviceBlock {
 public:
  DeviceBlock() = default;
  DeviceBlock(DeviceBlock&& other) noexcept;
  DeviceBlock& operator=(DeviceBlock&& other) noexcept;
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  ~DeviceBlock() { reset(); }

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::int64_t bytes() const { return reservation_.bytes(); }  // as requested
  std::int64_t class_bytes() const { return class_bytes_; }    // as held from the driver
  bool empty() const { return data_ == nullptr; }
  void reset() noexcept;  // back to the pool now (idempotent)

 private:
  friend class DevicePool;
  DeviceBlock(DevicePool* pool, void* data, std::int64_t class_bytes, Reservation reservation)
      : pool_(pool), data_(data), class_bytes_(class_bytes), reservation_(std::move(reservation)) {}
  DevicePool* pool_ = nullptr;
  void* data_ = nullptr;
  std::int64_t class_bytes_ = 0;
  Reservation reservation_;
};

// The pool's own footprint (what the driver has given it), beside the accounting's view.
struct DevicePoolStats {
  std::int64_t reserved_bytes = 0;       // held from the driver: live + cached
  std::int64_t peak_reserved_bytes = 0;
  std::int64_t cached_bytes = 0;         // on free lists
  std::int64_t live_blocks = 0;
  std::int64_t driver_allocations = 0;   // cudaMalloc calls that succeeded
  std::int64_t reuses = 0;               // requests served from a free list
};

class DevicePool {
 public:
  // No CUDA call here: the first cudaMalloc happens at the first allocate().
  DevicePool(AccountingAllocator& accounting, cudaStream_t stream);
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;
  ~DevicePool();  // cudaFree of every cached block (live blocks must be gone by then)

  // The class a request of `bytes` is served from (bytes >= 1): pool_size_class.h's rule.
  static std::int64_t class_of(std::int64_t bytes) { return pool_size_class(bytes); }

  // Accounts `bytes` under `tag` on the device tier, then hands out a block of class_of(bytes).
  // bytes == 0 gives an empty block (accounted as 0). Throws std::invalid_argument for
  // bytes < 0, OutOfMemory (budget or driver), SystemError for any other CUDA failure.
  DeviceBlock allocate(std::int64_t bytes, const std::string& tag);
  DeviceBlock allocate_uninitialized(std::int64_t bytes, const std::string& tag);

  DevicePoolStats stats() const;
  // The blocks on the free lists, sorted (pool_size_class.h, FreeBlock).
  std::vector<FreeBlock> free_blocks() const;
  cudaStream_t stream() const { return stream_; }

 private:
  friend class DeviceBlock;
  DeviceBlock take(std::int64_t bytes, const std::string& tag, bool zero);
  void* obtain_locked(std::int64_t class_bytes, std::int64_t requested, const std::string& tag);
  void give_back(void* data, std::int64_t class_bytes) noexcept;
  void free_cached_locked() noexcept;

  AccountingAllocator& accounting_;
  cudaStream_t stream_;
  mutable std::mutex mutex_;
  std::map<std::int64_t, std::vector<void*>> free_lists_;  // class bytes -> cached blocks
  DevicePoolStats stats_;
};

}  // namespace strata::cuda
