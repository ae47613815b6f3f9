// HostArena and the AccountingAllocator over it: freed blocks come back for requests of the
// same size (counted), zero-fill and poison are the allocator's, accounting counts the
// requested bytes whether a block is new or reused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "executor/memory/accounting_allocator.h"
#include "executor/memory/host_arena.h"

namespace strata {
namespace {

TEST(HostArena, BlockSizeRoundsUpToTheAlignment) {
  EXPECT_EQ(HostArena::block_bytes(1), 64);
  EXPECT_EQ(HostArena::block_bytes(64), 64);
  EXPECT_EQ(HostArena::block_bytes(65), 128);
}

TEST(HostArena, AFreedBlockServesTheNextRequestOfItsSize) {
  HostArena arena;
  void* a = arena.take(128);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % HostArena::kAlignment, 0u);
  arena.give_back(a, 128);
  EXPECT_EQ(arena.stats().free_bytes, 128);
  void* b = arena.take(128);
  EXPECT_EQ(b, a);  // the same block, not a new one
  const HostArenaStats s = arena.stats();
  EXPECT_EQ(s.system_allocations, 1);
  EXPECT_EQ(s.reuses, 1);
  EXPECT_EQ(s.held_bytes, 128);
  EXPECT_EQ(s.free_bytes, 0);
  arena.give_back(b, 128);
}

TEST(HostArena, AnotherSizeIsANewBlock) {
  HostArena arena;
  void* a = arena.take(128);
  arena.give_back(a, 128);
  void* b = arena.take(192);  // exact sizes: the free 128-byte block does not serve it
  const HostArenaStats s = arena.stats();
  EXPECT_EQ(s.system_allocations, 2);
  EXPECT_EQ(s.reuses, 0);
  EXPECT_EQ(s.held_bytes, 128 + 192);
  EXPECT_EQ(s.free_bytes, 128);
  arena.give_back(b, 192);
}

TEST(HostArena, WithoutReuseEveryBlockGoesBackToTheSystem) {
  HostArena arena(HostArenaOptions{/*reuse=*/false, /*poison_uninitialized=*/false});
  for (int i = 0; i < 3; ++i) arena.give_back(arena.take(256), 256);
  const HostArenaStats s = arena.stats();
  EXPECT_EQ(s.system_allocations, 3);
  EXPECT_EQ(s.reuses, 0);
  EXPECT_EQ(s.held_bytes, 0);
}

TEST(AccountingAllocatorArena, AZeroedRequestOnADirtyReusedBlockIsZero) {
  AccountingAllocator allocator;
  void* first = nullptr;
  {
    Buffer dirty = allocator.allocate(MemoryTier::kDevice, 100, "a", Fill::kUninitialized);
    first = dirty.data();
    std::memset(dirty.data(), 0xAB, 100);
  }
  Buffer clean = allocator.allocate(MemoryTier::kDevice, 100, "b");  // Fill::kZero
  ASSERT_EQ(clean.data(), first);  // reused: the test would prove nothing on a fresh block
  const auto* bytes = static_cast<const unsigned char*>(clean.data());
  for (int i = 0; i < 100; ++i) ASSERT_EQ(bytes[i], 0) << "byte " << i;
}

// Blocks of kMappedBytes and more are mapped: a fresh one is zero (the kernel's pages) and
// says so; the same block handed out again holds what was written and does not; a smaller
// fresh block (recycled heap memory) never claims it.
TEST(HostArena, OnlyAFreshMappedBlockIsKnownZero) {
  HostArena arena;
  const std::int64_t big = HostArena::kMappedBytes;
  bool zero = false;
  auto* a = static_cast<unsigned char*>(arena.take(big, &zero));
  EXPECT_TRUE(zero);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % HostArena::kAlignment, 0u);
  for (std::int64_t i = 0; i < big; i += 4093) ASSERT_EQ(a[i], 0) << "byte " << i;
  std::memset(a, 0xAB, static_cast<size_t>(big));
  arena.give_back(a, big);
  auto* b = static_cast<unsigned char*>(arena.take(big, &zero));
  ASSERT_EQ(b, a);
  EXPECT_FALSE(zero);
  arena.give_back(b, big);
  void* small = arena.take(HostArena::kMappedBytes - HostArena::kAlignment, &zero);
  EXPECT_FALSE(zero);
  arena.give_back(small, HostArena::kMappedBytes - HostArena::kAlignment);
}

// The allocator's side of it: a zeroed request is zero whether its block was freshly mapped
// (no fill) or reused dirty (filled), and poison never touches a zeroed request.
TEST(AccountingAllocatorArena, ZeroedLargeRequestsAreZeroFreshOrReused) {
  AccountingAllocator allocator(TierBudgets{}, HostArenaOptions{true, /*poison=*/true});
  const std::int64_t floats = HostArena::kMappedBytes / 4 + 16;  // mapped: over the threshold
  float* first = nullptr;
  {
    Buffer fresh = allocator.allocate_floats(MemoryTier::kDevice, floats, "m");
    for (std::int64_t i = 0; i < floats; ++i) ASSERT_EQ(fresh.f32()[i], 0.0f) << i;
    first = fresh.f32();
    std::fill(fresh.f32(), fresh.f32() + floats, 3.0f);
  }
  Buffer again = allocator.allocate_floats(MemoryTier::kDevice, floats, "v");
  ASSERT_EQ(again.f32(), first);  // reused: it held 3.0 until the fill
  for (std::int64_t i = 0; i < floats; ++i) ASSERT_EQ(again.f32()[i], 0.0f) << i;
}

TEST(AccountingAllocatorArena, PoisonFillsUninitializedMemoryWithNaN) {
  AccountingAllocator allocator(TierBudgets{}, HostArenaOptions{true, /*poison=*/true});
  Buffer b = allocator.allocate_floats(MemoryTier::kDevice, 10, "x", Fill::kUninitialized);
  for (std::int64_t i = 0; i < b.floats(); ++i) EXPECT_TRUE(std::isnan(b.f32()[i])) << i;
  Buffer z = allocator.allocate_floats(MemoryTier::kDevice, 10, "y");  // zeroed wins
  for (std::int64_t i = 0; i < z.floats(); ++i) EXPECT_EQ(z.f32()[i], 0.0f) << i;
}

TEST(AccountingAllocatorArena, AccountingCountsRequestedBytesNotBlocks) {
  TierBudgets budgets;
  budgets.device_bytes = 250;
  AccountingAllocator allocator(budgets);
  {
    Buffer a = allocator.allocate(MemoryTier::kDevice, 100, "a");  // a 128-byte block
    Buffer b = allocator.allocate(MemoryTier::kDevice, 150, "b");  // 100 + 150 = the budget
    EXPECT_EQ(allocator.usage(MemoryTier::kDevice).current_bytes, 250);
  }
  // Both blocks are now free in the arena (128 + 192 bytes held) but nothing is accounted:
  // the same 250 bytes fit again, and the peak stays what the requests were.
  EXPECT_EQ(allocator.usage(MemoryTier::kDevice).current_bytes, 0);
  EXPECT_EQ(allocator.arena_stats().free_bytes, 128 + 192);
  Buffer a = allocator.allocate(MemoryTier::kDevice, 100, "a");
  Buffer b = allocator.allocate(MemoryTier::kDevice, 150, "b");
  EXPECT_EQ(allocator.usage(MemoryTier::kDevice).peak_bytes, 250);
  EXPECT_EQ(allocator.arena_stats().system_allocations, 2);
  EXPECT_EQ(allocator.arena_stats().reuses, 2);
}

TEST(AccountingAllocatorArena, AMovedBufferGivesItsBlockBackOnce) {
  AccountingAllocator allocator;
  Buffer a = allocator.allocate(MemoryTier::kHost, 64, "a");
  Buffer b = std::move(a);
  a.reset();  // moved-from: owns nothing, gives nothing back
  EXPECT_EQ(allocator.arena_stats().free_bytes, 0);
  b.reset();
  b.reset();  // idempotent
  EXPECT_EQ(allocator.arena_stats().free_bytes, 64);
  // One block in the free list, not two: two requests need one new block.
  Buffer c = allocator.allocate(MemoryTier::kHost, 64, "c");
  Buffer d = allocator.allocate(MemoryTier::kHost, 64, "d");
  EXPECT_NE(c.data(), d.data());
  EXPECT_EQ(allocator.arena_stats().system_allocations, 2);
}

}  // namespace
}  // namespace strata
