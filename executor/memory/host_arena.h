// HostArena: the host memory behind one AccountingAllocator's Buffers, kept across steps.
// Issue 19 measured every buffer of a CPU step allocated, zeroed and page-faulted anew each
// step (glibc hands blocks this large to mmap and back to munmap, so every step touched fresh
// pages: 4,000-46,000 minor faults and a kernel page clear each). The arena keeps a block
// when its Buffer is freed and hands it out again for a request of the same size.
//
// - Exact-size free lists (the size rounded up to 64 bytes). A training step asks for the
//   same sizes in the same order every step, so after the first step every request finds a
//   block: no system allocation, no page fault. Exact sizes waste nothing to rounding; the
//   cost is that a size's blocks serve only that size, so the arena holds, per size, the most
//   blocks of it ever live at once (their sum can exceed the accounted peak when sizes peak
//   at different moments; docs/performance.md, "Buffers reused across steps", has the
//   figure for the 4-layer model).
// - The arena grows on demand and never shrinks while it lives: it is sized by the first
//   step rather than by a prediction, so a Program the memory model mispredicts still runs.
// - Accounting is not here: AccountingAllocator budgets and tags the requested bytes before
//   it asks the arena, so peaks, budgets and memory_tags.json do not see the arena at all.
// - Thread-safe (one mutex). Blocks given out must come back (Buffer does it) before the
//   arena is destroyed; the destructor frees what it holds.
// - Blocks of kMappedBytes or more are mapped anonymously (mmap), whose pages the kernel
//   hands out zeroed on first touch: take() says such a fresh block is zero, and the
//   allocator skips its fill. A large model's optimizer moments (2.8 GB for gpt2-350m) were
//   otherwise faulted in and cleared twice at set-up, once by the kernel and once by the
//   fill, before the first AdamW step wrote them; now their first touch is that step's.
// Deliberately not here: zero-filling (the allocator fills what a caller asks to be zeroed),
// device (CUDA) memory (executor/cuda/device_pool.h has its own free lists).
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace strata {

struct HostArenaOptions {
  // false: every block comes from the system allocator and goes back to it (no reuse), the
  // behaviour before issue 19; kept for comparisons and tests.
  bool reuse = true;
  // Tests: the allocator fills memory handed out uninitialised with 0xFF bytes (a NaN as
  // float), so a caller that reads before it writes shows up in the losses.
  bool poison_uninitialized = false;
};

struct HostArenaStats {
  std::int64_t system_allocations = 0;  // blocks obtained from the system allocator, ever
  std::int64_t reuses = 0;              // requests served from a free list, ever
  std::int64_t held_bytes = 0;          // bytes obtained from the system and not freed (in use + free)
  std::int64_t free_bytes = 0;          // of those, the bytes in the free lists now
};

class HostArena {
 public:
  static constexpr std::int64_t kAlignment = 64;  // a cache line; AVX-512 friendly
  // Blocks this large or larger are mapped (page-aligned, zero until written); smaller ones
  // come from aligned_alloc, whose blocks may be recycled heap memory.
  static constexpr std::int64_t kMappedBytes = std::int64_t{1} << 20;
  // Mapped blocks this large or larger ask for transparent huge pages (host_pages.h): a
  // fault maps and clears 2 MiB at once. Set-up's first touch of a large model's state
  // was its page faults more than its draws (issue 38: 26 of 36 s of CPU for gpt2-1.5b's
  // offloaded parameters on the 2-core VM, whose 4 KiB faults cost ~10 s a GiB that day,
  // against ~0.2 s a GiB in huge pages).
  static constexpr std::int64_t kHugeBytes = std::int64_t{2} << 20;

  explicit HostArena(HostArenaOptions options = {}) : options_(options) {}
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;
  ~HostArena();

  // A request's block size: bytes rounded up to kAlignment (bytes > 0).
  static std::int64_t block_bytes(std::int64_t bytes) {
    return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  // A kAlignment-aligned block of block_bytes (a multiple of kAlignment, > 0). Its contents
  // are undefined unless *known_zero is set to true: a freshly mapped block (never written).
  // Throws SystemError when the system allocator fails.
  void* take(std::int64_t block_bytes, bool* known_zero = nullptr);
  // Returns a block from take() with the same block_bytes.
  void give_back(void* data, std::int64_t block_bytes) noexcept;

  HostArenaStats stats() const;
  const HostArenaOptions& options() const { return options_; }

 private:
  const HostArenaOptions options_;
  mutable std::mutex mutex_;
  std::unordered_map<std::int64_t, std::vector<void*>> free_;  // block bytes -> free blocks
  HostArenaStats stats_;
};

}  // namespace strata
