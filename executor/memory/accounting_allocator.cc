// AccountingAllocator: budgets, current and peak bytes per tier and per tag, and the RAII
// owners that give bytes back (see accounting_allocator.h).
#include "executor/memory/accounting_allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/errors.h"
#include "executor/memory/host_pages.h"
#include "kernels/cpu/elementwise.h"

namespace strata {
namespace {

size_t index_of(MemoryTier tier) { return static_cast<size_t>(tier); }

std::string format_bytes(std::int64_t bytes) {
  if (bytes == kUnlimitedBytes) {
    return "unlimited";
  }
  return fmt::format("{} bytes ({:.3f} GiB)", bytes,
                     static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

}  // namespace

std::string_view to_string(MemoryTier tier) {
  switch (tier) {
    case MemoryTier::kDevice: return "device";
    case MemoryTier::kHost: return "host";
    case MemoryTier::kNvme: return "nvme";
  }
  return "unknown";
}

TierBudgets TierBudgets::per_rank(const ClusterSpec& cluster, std::int64_t ranks_per_node) {
  const std::int64_t ranks = ranks_per_node > 0 ? ranks_per_node : cluster.gpus_per_node;
  if (ranks < 1) {
    throw ConfigError(fmt::format(
        "cluster '{}': gpus_per_node = {}, expected >= 1 to divide host memory between ranks",
        cluster.name, cluster.gpus_per_node));
  }
  TierBudgets budgets;
  budgets.device_bytes = static_cast<std::int64_t>(cluster.device.memory_bytes);
  budgets.host_bytes = static_cast<std::int64_t>(cluster.host.memory_bytes) / ranks;
  budgets.nvme_bytes = static_cast<std::int64_t>(cluster.nvme.capacity_bytes) / ranks;
  return budgets;
}

std::int64_t TierBudgets::of(MemoryTier tier) const {
  switch (tier) {
    case MemoryTier::kDevice: return device_bytes;
    case MemoryTier::kHost: return host_bytes;
    case MemoryTier::kNvme: return nvme_bytes;
  }
  return 0;
}

// ---- Reservation ----

Reservation::Reservation(Reservation&& other) noexcept
    : owner_(other.owner_), tier_(other.tier_), bytes_(other.bytes_), tag_id_(other.tag_id_) {
  other.owner_ = nullptr;
  other.bytes_ = 0;
}

Reservation& Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    release();
    owner_ = other.owner_;
    tier_ = other.tier_;
    bytes_ = other.bytes_;
    tag_id_ = other.tag_id_;
    other.owner_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void Reservation::release() noexcept {
  if (owner_ != nullptr) {
    owner_->release(tier_, bytes_, tag_id_);
    owner_ = nullptr;
  }
  bytes_ = 0;
}

// ---- Buffer ----

Buffer::Buffer(Buffer&& other) noexcept
    : data_(other.data_),
      reservation_(std::move(other.reservation_)),
      arena_(other.arena_),
      block_bytes_(other.block_bytes_) {
  other.data_ = nullptr;
  other.arena_ = nullptr;
  other.block_bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    reservation_ = std::move(other.reservation_);
    arena_ = other.arena_;
    block_bytes_ = other.block_bytes_;
    other.data_ = nullptr;
    other.arena_ = nullptr;
    other.block_bytes_ = 0;
  }
  return *this;
}

void Buffer::reset() noexcept {
  if (arena_ != nullptr) arena_->give_back(data_, block_bytes_);
  data_ = nullptr;
  arena_ = nullptr;
  block_bytes_ = 0;
  reservation_.release();
}

// ---- AccountingAllocator ----

AccountingAllocator::AccountingAllocator(TierBudgets budgets, HostArenaOptions arena)
    : budgets_(budgets), arena_(arena) {
  for (int t = 0; t < kMemoryTierCount; ++t) {
    const MemoryTier tier = static_cast<MemoryTier>(t);
    if (budgets_.of(tier) < 0) {
      throw ConfigError(fmt::format("memory budget of tier '{}' is {} bytes, expected >= 0",
                                    to_string(tier), budgets_.of(tier)));
    }
    usage_[index_of(tier)].budget_bytes = budgets_.of(tier);
  }
}

Reservation AccountingAllocator::reserve(MemoryTier tier, std::int64_t bytes,
                                         const std::string& tag) {
  if (bytes < 0) {
    throw std::invalid_argument(
        fmt::format("reserve '{}' on tier '{}': {} bytes is negative", tag, to_string(tier), bytes));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  TierUsage& usage = usage_[index_of(tier)];
  const std::int64_t free_bytes = usage.budget_bytes - usage.current_bytes;
  if (bytes > free_bytes) {
    throw OutOfMemory(
        std::string(to_string(tier)), bytes, free_bytes,
        fmt::format("out of {} memory: '{}' asked for {}, {} free of a {} budget; biggest live: {}",
                    to_string(tier), tag, format_bytes(bytes), format_bytes(free_bytes),
                    format_bytes(usage.budget_bytes), describe_live_tags_locked(tier, 3)));
  }
  const auto key = std::make_pair(static_cast<int>(tier), tag);
  auto it = tag_ids_.find(key);
  if (it == tag_ids_.end()) {
    it = tag_ids_.emplace(key, static_cast<int>(tags_.size())).first;
    tags_.push_back(TagUsage{tag, tier, 0, 0});
  }
  TagUsage& tag_usage = tags_[static_cast<size_t>(it->second)];
  usage.current_bytes += bytes;
  tag_usage.current_bytes += bytes;
  tag_usage.peak_bytes = std::max(tag_usage.peak_bytes, tag_usage.current_bytes);
  if (usage.current_bytes > usage.peak_bytes) {
    usage.peak_bytes = usage.current_bytes;
    // A few dozen tags, and a new peak is rare after the first step.
    for (TagUsage& t : tags_) {
      if (t.tier == tier) t.at_tier_peak_bytes = t.current_bytes;
    }
  }
  return Reservation(this, tier, bytes, it->second);
}

Buffer AccountingAllocator::allocate(MemoryTier tier, std::int64_t bytes, const std::string& tag,
                                     Fill fill) {
  if (tier == MemoryTier::kNvme) {
    throw std::invalid_argument(fmt::format(
        "allocate '{}': the nvme tier holds files, not memory; use reserve() for its bytes", tag));
  }
  Reservation reservation = reserve(tier, bytes, tag);  // checks the budget first
  if (bytes == 0) {
    return Buffer(nullptr, std::move(reservation), nullptr, 0);
  }
  const std::int64_t block_bytes = HostArena::block_bytes(bytes);
  void* data = nullptr;
  bool known_zero = false;
  try {
    data = arena_.take(block_bytes, &known_zero);
  } catch (const SystemError& e) {
    throw SystemError(fmt::format("allocating '{}' on tier '{}': {}", tag, to_string(tier), e.what()));
  }
  // A reused block holds the bytes of whatever used it last; a fresh mapped one is zero (the
  // arena says so, host_arena.h), and filling it would fault in and clear its pages twice.
  if (fill == Fill::kZero) {
    // On every thread: a large model's gradients and moments are GiBs of fresh pages, whose
    // faults and clearing were a quarter of its set-up on one thread. A multiple of 64 bytes.
    if (!known_zero) {
      kernels::cpu::zero(static_cast<float*>(data),
                         block_bytes / static_cast<std::int64_t>(sizeof(float)));
    }
  } else if (arena_.options().poison_uninitialized) {
    std::memset(data, 0xFF, static_cast<size_t>(block_bytes));
  } else if (known_zero) {
    // A fresh block the caller is about to write whole: faulted in here on every thread,
    // 2 MiB at a time where huge pages were granted, not page by page by its writes.
    populate_on_every_thread(data, mapped_bytes(block_bytes));
  }
  return Buffer(data, std::move(reservation), &arena_, block_bytes);
}

void AccountingAllocator::release(MemoryTier tier, std::int64_t bytes, int tag_id) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  usage_[index_of(tier)].current_bytes -= bytes;
  tags_[static_cast<size_t>(tag_id)].current_bytes -= bytes;
}

std::string AccountingAllocator::describe_live_tags_locked(MemoryTier tier, int limit) const {
  std::vector<const TagUsage*> live;
  for (const TagUsage& t : tags_) {
    if (t.tier == tier && t.current_bytes > 0) live.push_back(&t);
  }
  // Biggest first; ties by name so the message is deterministic.
  std::sort(live.begin(), live.end(), [](const TagUsage* a, const TagUsage* b) {
    return a->current_bytes != b->current_bytes ? a->current_bytes > b->current_bytes
                                                : a->tag < b->tag;
  });
  if (live.empty()) {
    return "nothing";
  }
  std::string text;
  for (size_t i = 0; i < live.size() && i < static_cast<size_t>(limit); ++i) {
    text += fmt::format("{}{} {} bytes", i == 0 ? "" : ", ", live[i]->tag, live[i]->current_bytes);
  }
  return text;
}

TierUsage AccountingAllocator::usage(MemoryTier tier) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return usage_[index_of(tier)];
}

TierBytes AccountingAllocator::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return TierBytes{static_cast<double>(usage_[0].peak_bytes),
                   static_cast<double>(usage_[1].peak_bytes),
                   static_cast<double>(usage_[2].peak_bytes)};
}

TierBytes AccountingAllocator::current_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return TierBytes{static_cast<double>(usage_[0].current_bytes),
                   static_cast<double>(usage_[1].current_bytes),
                   static_cast<double>(usage_[2].current_bytes)};
}

std::vector<TagUsage> AccountingAllocator::tags() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TagUsage> out = tags_;
  std::sort(out.begin(), out.end(), [](const TagUsage& a, const TagUsage& b) {
    return a.tier != b.tier ? a.tier < b.tier : a.tag < b.tag;
  });
  return out;
}

void AccountingAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (TierUsage& u : usage_) u.peak_bytes = u.current_bytes;
  for (TagUsage& t : tags_) t.peak_bytes = t.at_tier_peak_bytes = t.current_bytes;
}

}  // namespace strata
