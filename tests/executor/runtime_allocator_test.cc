// AccountingAllocator: budgets, current and peak bytes per tier and per tag, the OutOfMemory
// fields and message, alignment and zeroing, RAII release on destruction and move.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/errors.h"
#include "executor/memory/accounting_allocator.h"

namespace strata {
namespace {

TierBudgets device_budget(std::int64_t bytes) {
  TierBudgets budgets;
  budgets.device_bytes = bytes;
  return budgets;
}

TEST(AccountingAllocator, TierNames) {
  EXPECT_EQ(to_string(MemoryTier::kDevice), "device");
  EXPECT_EQ(to_string(MemoryTier::kHost), "host");
  EXPECT_EQ(to_string(MemoryTier::kNvme), "nvme");
}

TEST(AccountingAllocator, CurrentAndPeakFollowAllocationsAndFrees) {
  AccountingAllocator allocator(device_budget(1000));
  {
    Buffer a = allocator.allocate(MemoryTier::kDevice, 400, "a");
    Buffer b = allocator.allocate(MemoryTier::kDevice, 300, "b");
    EXPECT_EQ(allocator.usage(MemoryTier::kDevice).current_bytes, 700);  // 400 + 300
    a.reset();
    EXPECT_EQ(allocator.usage(MemoryTier::kDevice).current_bytes, 300);
    EXPECT_EQ(allocator.usage(MemoryTier::kDevice).peak_bytes, 700);  // the peak stays
    Buffer c = allocator.allocate(MemoryTier::kDevice, 600, "c");
    EXPECT_EQ(allocator.usage(MemoryTier::kDevice).peak_bytes, 900);  // 300 + 600
  }
  const TierUsage usage = allocator.usage(MemoryTier::kDevice);
  EXPECT_EQ(usage.current_bytes, 0);  // every Buffer went out of scope
  EXPECT_EQ(usage.peak_bytes, 900);
  EXPECT_EQ(usage.budget_bytes, 1000);
  EXPECT_EQ(allocator.peak_bytes(), (TierBytes{900, 0, 0}));
}

TEST(AccountingAllocator, ExactFitSucceedsOneMoreByteThrowsWithFields) {
  AccountingAllocator allocator(device_budget(1000));
  Buffer b = allocator.allocate(MemoryTier::kDevice, 300, "b");
  Buffer c = allocator.allocate(MemoryTier::kDevice, 600, "c");
  try {
    allocator.allocate(MemoryTier::kDevice, 101, "d");  // free = 1000 - 900 = 100
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.tier, "device");
    EXPECT_EQ(e.requested_bytes, 101);
    EXPECT_EQ(e.free_bytes, 100);
    const std::string message = e.what();
    EXPECT_NE(message.find("out of device memory"), std::string::npos) << message;
    EXPECT_NE(message.find("'d' asked for 101 bytes"), std::string::npos) << message;
    EXPECT_NE(message.find("100 bytes"), std::string::npos) << message;
    EXPECT_NE(message.find("1000 bytes"), std::string::npos) << message;  // the budget
    // Biggest live tags first.
    EXPECT_NE(message.find("biggest live: c 600 bytes, b 300 bytes"), std::string::npos)
        << message;
  }
  // The failed request changed nothing; the exact remainder still fits.
  EXPECT_EQ(allocator.usage(MemoryTier::kDevice).current_bytes, 900);
  Buffer d = allocator.allocate(MemoryTier::kDevice, 100, "d");
  EXPECT_EQ(allocator.usage(MemoryTier::kDevice).current_bytes, 1000);
}

TEST(AccountingAllocator, MemoryIsZeroedAnd64ByteAligned) {
  AccountingAllocator allocator;
  for (std::int64_t bytes : {1, 63, 64, 100, 4096 + 4}) {
    Buffer buffer = allocator.allocate(MemoryTier::kHost, bytes, "x");
    ASSERT_NE(buffer.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buffer.data()) % 64, 0u) << bytes;
    const auto* p = static_cast<const unsigned char*>(buffer.data());
    for (std::int64_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], 0) << "byte " << i;
    EXPECT_EQ(buffer.bytes(), bytes);  // accounting counts the request, not the padding
    EXPECT_EQ(allocator.usage(MemoryTier::kHost).current_bytes, bytes);
  }
}

TEST(AccountingAllocator, FloatBuffers) {
  AccountingAllocator allocator;
  Buffer weights = allocator.allocate_floats(MemoryTier::kDevice, 10, "weights");
  EXPECT_EQ(weights.bytes(), 40);  // 10 floats * 4 bytes
  EXPECT_EQ(weights.floats(), 10);
  weights.f32()[9] = 1.5f;
  EXPECT_EQ(weights.f32()[9], 1.5f);
}

TEST(AccountingAllocator, MovesTransferOwnershipWithoutDoubleRelease) {
  AccountingAllocator allocator(device_budget(100));
  Buffer a = allocator.allocate(MemoryTier::kDevice, 60, "a");
  Buffer moved = std::move(a);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(moved.bytes(), 60);
  EXPECT_EQ(allocator.usage(MemoryTier::kDevice).current_bytes, 60);
  Buffer b = allocator.allocate(MemoryTier::kDevice, 40, "b");
  moved = std::move(b);  // frees the 60 bytes it held
  EXPECT_EQ(allocator.usage(MemoryTier::kDevice).current_bytes, 40);
  moved.reset();
  moved.reset();  // idempotent
  EXPECT_EQ(allocator.usage(MemoryTier::kDevice).current_bytes, 0);
}

TEST(AccountingAllocator, TagsTrackTheirOwnPeak) {
  AccountingAllocator allocator;
  {
    Buffer x1 = allocator.allocate(MemoryTier::kDevice, 100, "activations");
    Buffer x2 = allocator.allocate(MemoryTier::kDevice, 100, "activations");
    Buffer w = allocator.allocate(MemoryTier::kDevice, 50, "weights");
  }
  Buffer h = allocator.allocate(MemoryTier::kHost, 7, "optimizer");
  const std::vector<TagUsage> tags = allocator.tags();  // sorted by (tier, tag)
  ASSERT_EQ(tags.size(), 3u);
  EXPECT_EQ(tags[0].tag, "activations");
  EXPECT_EQ(tags[0].peak_bytes, 200);  // two live at once
  EXPECT_EQ(tags[0].current_bytes, 0);
  EXPECT_EQ(tags[1].tag, "weights");
  EXPECT_EQ(tags[1].peak_bytes, 50);
  EXPECT_EQ(tags[2].tag, "optimizer");
  EXPECT_EQ(tags[2].tier, MemoryTier::kHost);
  EXPECT_EQ(tags[2].current_bytes, 7);
}

TEST(AccountingAllocator, ResetPeaksStartsANewWindow) {
  AccountingAllocator allocator;
  Buffer kept = allocator.allocate(MemoryTier::kDevice, 10, "kept");
  { Buffer temp = allocator.allocate(MemoryTier::kDevice, 90, "temp"); }
  EXPECT_EQ(allocator.usage(MemoryTier::kDevice).peak_bytes, 100);  // 10 + 90
  allocator.reset_peaks();
  EXPECT_EQ(allocator.usage(MemoryTier::kDevice).peak_bytes, 10);  // only what is live
  { Buffer temp = allocator.allocate(MemoryTier::kDevice, 5, "temp"); }
  EXPECT_EQ(allocator.usage(MemoryTier::kDevice).peak_bytes, 15);
}

TEST(AccountingAllocator, NvmeIsReservedNotAllocated) {
  TierBudgets budgets;
  budgets.nvme_bytes = 1 << 20;
  AccountingAllocator allocator(budgets);
  EXPECT_THROW(allocator.allocate(MemoryTier::kNvme, 10, "file"), std::invalid_argument);
  {
    Reservation file = allocator.reserve(MemoryTier::kNvme, 1 << 19, "optimizer.bin");
    EXPECT_EQ(allocator.usage(MemoryTier::kNvme).current_bytes, 1 << 19);
    EXPECT_THROW(allocator.reserve(MemoryTier::kNvme, (1 << 19) + 1, "more"), OutOfMemory);
  }
  EXPECT_EQ(allocator.usage(MemoryTier::kNvme).current_bytes, 0);
  EXPECT_EQ(allocator.peak_bytes().nvme, 1 << 19);
}

TEST(AccountingAllocator, RejectsNegativeRequestsAndBudgets) {
  AccountingAllocator allocator;
  EXPECT_THROW(allocator.allocate(MemoryTier::kHost, -1, "x"), std::invalid_argument);
  EXPECT_THROW(AccountingAllocator(device_budget(-5)), ConfigError);
}

TEST(AccountingAllocator, PerRankBudgetsSplitTheNode) {
  ClusterSpec cluster;
  cluster.name = "dgx-a100";
  cluster.gpus_per_node = 8;
  cluster.device.memory_bytes = 80.0 * (1 << 30);   // 80 GiB per GPU
  cluster.host.memory_bytes = 1024.0 * (1 << 30);   // 1 TiB per node
  cluster.nvme.capacity_bytes = 16e12;              // 16 TB per node
  const TierBudgets budgets = TierBudgets::per_rank(cluster);
  EXPECT_EQ(budgets.device_bytes, 80LL << 30);
  EXPECT_EQ(budgets.host_bytes, 128LL << 30);                  // 1 TiB / 8 ranks
  EXPECT_EQ(budgets.nvme_bytes, static_cast<std::int64_t>(2e12));  // 16 TB / 8 ranks
  EXPECT_EQ(TierBudgets::per_rank(cluster, 2).host_bytes, 512LL << 30);  // 2 ranks share it
  cluster.gpus_per_node = 0;
  EXPECT_THROW(TierBudgets::per_rank(cluster), ConfigError);
}

TEST(AccountingAllocator, ConcurrentUseKeepsCountsConsistent) {
  AccountingAllocator allocator(device_budget(1 << 20));
  auto work = [&allocator] {
    for (int i = 0; i < 2000; ++i) {
      Buffer b = allocator.allocate(MemoryTier::kDevice, 64, "worker");
    }
  };
  std::thread t1(work), t2(work);
  t1.join();
  t2.join();
  EXPECT_EQ(allocator.usage(MemoryTier::kDevice).current_bytes, 0);
  // At most one 64-byte buffer per thread is live at a time.
  EXPECT_LE(allocator.usage(MemoryTier::kDevice).peak_bytes, 128);
  EXPECT_GE(allocator.usage(MemoryTier::kDevice).peak_bytes, 64);
}

}  // namespace
}  // namespace strata
