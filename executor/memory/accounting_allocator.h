// AccountingAllocator: every byte the executor holds goes through it, per memory tier
// (device, host, nvme), so a run reports its peak bytes per tier (and per tag) and the memory
// model can be tested against it to the byte.
//
// - allocate(tier, bytes, tag[, fill]): real memory, 64-byte aligned, zero-filled unless the
//   caller asks for Fill::kUninitialized, owned by a move-only Buffer that gives its bytes
//   back on destruction. On the CPU backend the "device" tier is host memory under the
//   device budget. The nvme tier holds no memory, so allocate() rejects it.
// - The memory comes from a HostArena (host_arena.h) that keeps freed blocks for the next
//   request of the same size, so a training step after the first makes no system
//   allocation and touches no fresh page. The arena is below the accounting: budgets, tags
//   and peaks count the requested bytes whether a block is new or reused.
// - reserve(tier, bytes, tag): accounting only, for memory someone else holds (NVMe files,
//   cudaMalloc'd device memory, pinned host buffers): a move-only Reservation.
// - Accounting counts the requested bytes (padding to 64 bytes is not counted), so a
//   prediction in exact bytes can be compared with the measured peak.
// - Over budget: throws strata::OutOfMemory{tier, requested, free} naming the tier, the
//   request, the free bytes, the budget and the biggest live tags.
// - Thread-safe (one mutex; allocations are coarse, whole tensors). The allocator must
//   outlive every Buffer and Reservation it hands out.
// Deliberately not here: pinned memory, the I/O of the nvme tier.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "cost_model/specs/step_report.h"
#include "executor/memory/host_arena.h"

namespace strata {

struct ClusterSpec;

enum class MemoryTier { kDevice = 0, kHost = 1, kNvme = 2 };
inline constexpr int kMemoryTierCount = 3;
std::string_view to_string(MemoryTier tier);  // "device" | "host" | "nvme"

inline constexpr std::int64_t kUnlimitedBytes = std::numeric_limits<std::int64_t>::max();

struct TierBudgets {
  std::int64_t device_bytes = kUnlimitedBytes;
  std::int64_t host_bytes = kUnlimitedBytes;
  std::int64_t nvme_bytes = kUnlimitedBytes;

  // One rank's share of a cluster: the whole device memory; the node's host memory and NVMe
  // capacity divided by the ranks on the node (ranks_per_node, default gpus_per_node).
  static TierBudgets per_rank(const ClusterSpec& cluster, std::int64_t ranks_per_node = 0);
  std::int64_t of(MemoryTier tier) const;
};

struct TierUsage {
  std::int64_t budget_bytes = 0;
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;
};

struct TagUsage {
  std::string tag;
  MemoryTier tier = MemoryTier::kDevice;
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;  // this tag's own peak (not its share of the tier's peak)
  // This tag's bytes when its tier first reached its peak: the tier's peak by tag, which the
  // memory model's prediction by kind is compared with (memory_kinds.h).
  std::int64_t at_tier_peak_bytes = 0;
};

class AccountingAllocator;

// Accounting for bytes held elsewhere. Move-only; releases on destruction.
class Reservation {
 public:
  Reservation() = default;
  Reservation(Reservation&& other) noexcept;
  Reservation& operator=(Reservation&& other) noexcept;
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  ~Reservation() { release(); }

  std::int64_t bytes() const { return bytes_; }
  MemoryTier tier() const { return tier_; }
  void release() noexcept;  // gives the bytes back now (idempotent)

 private:
  friend class AccountingAllocator;
  Reservation(AccountingAllocator* owner, MemoryTier tier, std::int64_t bytes, int tag_id)
      : owner_(owner), tier_(tier), bytes_(bytes), tag_id_(tag_id) {}
  AccountingAllocator* owner_ = nullptr;
  MemoryTier tier_ = MemoryTier::kDevice;
  std::int64_t bytes_ = 0;
  int tag_id_ = -1;
};

// Accounted, 64-byte aligned memory. Move-only; gives its block back to the arena on
// destruction.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  void* data() const { return data_; }
  std::int64_t bytes() const { return reservation_.bytes(); }
  MemoryTier tier() const { return reservation_.tier(); }
  bool empty() const { return bytes() == 0; }
  // Typed views: f32() is data() as float*, floats() = bytes() / sizeof(float).
  float* f32() const { return static_cast<float*>(data_); }
  std::int64_t floats() const { return bytes() / static_cast<std::int64_t>(sizeof(float)); }
  void reset() noexcept;  // frees now (idempotent)

 private:
  friend class AccountingAllocator;
  Buffer(void* data, Reservation reservation, HostArena* arena, std::int64_t block_bytes)
      : data_(data), reservation_(std::move(reservation)), arena_(arena), block_bytes_(block_bytes) {}
  void* data_ = nullptr;
  Reservation reservation_;
  HostArena* arena_ = nullptr;    // where data_ goes back (null when data_ is)
  std::int64_t block_bytes_ = 0;  // data_'s block size in the arena (bytes() padded)
};

// What allocate() leaves in the memory it hands out.
enum class Fill {
  kZero,           // zero-filled: for memory accumulated into (gradients, +=)
  kUninitialized,  // whatever the block held: for memory written in full before it is read
};

class AccountingAllocator {
 public:
  explicit AccountingAllocator(TierBudgets budgets = {}, HostArenaOptions arena = {});
  AccountingAllocator(const AccountingAllocator&) = delete;
  AccountingAllocator& operator=(const AccountingAllocator&) = delete;

  // Throws OutOfMemory when bytes do not fit, std::invalid_argument for bytes < 0 or
  // allocate() on the nvme tier, SystemError if the system allocator fails.
  Buffer allocate(MemoryTier tier, std::int64_t bytes, const std::string& tag,
                  Fill fill = Fill::kZero);
  Buffer allocate_floats(MemoryTier tier, std::int64_t count, const std::string& tag,
                         Fill fill = Fill::kZero) {
    return allocate(tier, count * static_cast<std::int64_t>(sizeof(float)), tag, fill);
  }
  Reservation reserve(MemoryTier tier, std::int64_t bytes, const std::string& tag);

  TierUsage usage(MemoryTier tier) const;
  TierBytes peak_bytes() const;     // per tier, for the RunReport
  TierBytes current_bytes() const;
  std::vector<TagUsage> tags() const;  // every tag seen, sorted by (tier, tag)
  // Start a new peak window (e.g. after setup, per step): peaks := current.
  void reset_peaks();
  // The arena under the Buffers: system allocations and reuses (tests, measurements).
  HostArenaStats arena_stats() const { return arena_.stats(); }

 private:
  friend class Reservation;
  void release(MemoryTier tier, std::int64_t bytes, int tag_id) noexcept;
  std::string describe_live_tags_locked(MemoryTier tier, int limit) const;

  mutable std::mutex mutex_;
  TierBudgets budgets_;
  std::array<TierUsage, kMemoryTierCount> usage_{};
  std::vector<TagUsage> tags_;                 // indexed by tag id
  std::map<std::pair<int, std::string>, int> tag_ids_;  // (tier, tag) -> id
  HostArena arena_;  // its own lock: a block's system allocation is outside mutex_
};

}  // namespace strata
