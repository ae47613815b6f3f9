// The size classes of a rank's caching device pool: a request is served from a block of
// class pool_size_class(bytes), and a freed block is handed out again to any request of its
// class, whatever that request's dtype or exact size. Powers of two from 512 B to 1 MiB, then
// multiples of 2 MiB (big blocks rounded, as PyTorch's allocator rounds its large segments).
// One rule for the CUDA backend's DevicePool and for the CUDA-semantics CPU mode's pool, so
// that the mode hands a stale fp32 scratch block to a bf16 shard exactly when a GPU would.
#pragma once

#include <cstdint>
#include <functional>

namespace strata {

inline constexpr std::int64_t kPoolMinBlockBytes = 512;
inline constexpr std::int64_t kPoolSmallLimitBytes = std::int64_t{1} << 20;    // 1 MiB
inline constexpr std::int64_t kPoolLargeGranuleBytes = std::int64_t{2} << 20;  // 2 MiB

// The class a request of `bytes` (>= 1) is served from; std::invalid_argument below 1.
std::int64_t pool_size_class(std::int64_t bytes);

// A free block of a pool: its address and size class. A captured step (CUDA graphs) may
// replay only while the blocks it uses as scratch are all free, which the pool's free blocks
// including those after the capture shows (Backend::free_blocks).
struct FreeBlock {
  const void* data = nullptr;
  std::int64_t class_bytes = 0;
  friend bool operator<(const FreeBlock& a, const FreeBlock& b) {
    return a.data != b.data ? std::less<const void*>{}(a.data, b.data) : a.class_bytes < b.class_bytes;
  }
  friend bool operator==(const FreeBlock&, const FreeBlock&) = default;
};

}  // namespace strata
