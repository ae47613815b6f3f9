// Exact-size free lists of 64-byte aligned host blocks (see host_arena.h).
#include "executor/memory/host_arena.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cost_model/specs/errors.h"
#include "executor/memory/host_pages.h"

// Under AddressSanitizer a block in a free list is poisoned, so a Buffer's stale pointer
// read after its reset() is still reported as it was when blocks went back to free().
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STRATA_ARENA_ASAN 1  // clang
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define STRATA_ARENA_ASAN 1  // gcc
#endif
#if defined(STRATA_ARENA_ASAN)
#include <sanitizer/asan_interface.h>
#define STRATA_ARENA_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), static_cast<size_t>(n))
#define STRATA_ARENA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), static_cast<size_t>(n))
#else
#define STRATA_ARENA_POISON(p, n) ((void)(p), (void)(n))
#define STRATA_ARENA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace strata {
namespace {

bool mapped(std::int64_t block_bytes) { return block_bytes >= HostArena::kMappedBytes; }

void* system_block(std::int64_t block_bytes) {
  if (mapped(block_bytes)) return map_zero_pages(block_bytes, block_bytes >= HostArena::kHugeBytes);
  void* block = std::aligned_alloc(static_cast<size_t>(HostArena::kAlignment),
                                   static_cast<size_t>(block_bytes));
  if (block == nullptr) {
    throw SystemError(fmt::format("aligned_alloc({}, {}) failed at {}:{}: {}",
                                  HostArena::kAlignment, block_bytes, __FILE__, __LINE__,
                                  std::strerror(errno)));
  }
  return block;
}

// munmap fails only for an address range that was never mapped: a caller's bug, and in a
// noexcept path; the bytes are then lost, not freed twice.
void free_system_block(void* block, std::int64_t block_bytes) noexcept {
  if (mapped(block_bytes)) {
    unmap_pages(block, block_bytes);
  } else {
    std::free(block);
  }
}

}  // namespace

HostArena::~HostArena() {
  for (auto& [bytes, blocks] : free_) {
    for (void* block : blocks) {
      STRATA_ARENA_UNPOISON(block, bytes);
      free_system_block(block, bytes);
    }
  }
}

void* HostArena::take(std::int64_t block_bytes, bool* known_zero) {
  if (known_zero != nullptr) *known_zero = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = free_.find(block_bytes);
    if (it != free_.end() && !it->second.empty()) {
      void* block = it->second.back();
      it->second.pop_back();
      stats_.free_bytes -= block_bytes;
      ++stats_.reuses;
      STRATA_ARENA_UNPOISON(block, block_bytes);
      return block;
    }
  }
  // Outside the lock: a fresh block may be large, and the system allocator has its own.
  void* block = system_block(block_bytes);
  if (known_zero != nullptr) *known_zero = mapped(block_bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.system_allocations;
  stats_.held_bytes += block_bytes;
  return block;
}

void HostArena::give_back(void* data, std::int64_t block_bytes) noexcept {
  if (data == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (options_.reuse) {
    try {
      free_[block_bytes].push_back(data);
      stats_.free_bytes += block_bytes;
      STRATA_ARENA_POISON(data, block_bytes);
      return;
    } catch (...) {
      // No memory for the list's entry: the block goes back to the system instead.
    }
  }
  free_system_block(data, block_bytes);
  stats_.held_bytes -= block_bytes;
}

HostArenaStats HostArena::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace strata
