// Host-side tests of the CUDA backend's runtime (built with the toolkit, pass without a GPU):
// the pool's size classes, budget and argument checks that must fire BEFORE any CUDA call
// (on a machine with no device, reaching the runtime would throw SystemError instead), the
// deterministic-sum block layout, the device probe, and CudaError -> SystemError translation.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "cost_model/specs/errors.h"
#include "executor/cuda/collective_layout.h"
#include "executor/cuda/device_pool.h"
#include "executor/cuda/device_probe.h"
#include "executor/cuda/pinned_host_buffer.h"
#include "executor/cuda/streams.h"
#include "executor/cuda/system_error.h"
#include "executor/memory/accounting_allocator.h"
#include "executor/runtime/backend_select.h"
#include "kernels/cuda/cuda_check.h"
#ifdef STRATA_HAVE_NCCL
#include "executor/cuda/nccl_communicator.h"
#endif

namespace strata::cuda {
namespace {

constexpr std::int64_t kKiB = 1024;
constexpr std::int64_t kMiB = 1024 * 1024;

TEST(DevicePoolClasses, PowersOfTwoUpTo1MiBThen2MiBMultiples) {
  EXPECT_EQ(DevicePool::class_of(1), 512);          // the smallest class
  EXPECT_EQ(DevicePool::class_of(512), 512);
  EXPECT_EQ(DevicePool::class_of(513), kKiB);       // next power of two
  EXPECT_EQ(DevicePool::class_of(3000), 4 * kKiB);
  EXPECT_EQ(DevicePool::class_of(kMiB), kMiB);      // the last small class
  EXPECT_EQ(DevicePool::class_of(kMiB + 1), 2 * kMiB);  // first large class: 1 granule
  EXPECT_EQ(DevicePool::class_of(3 * kMiB), 4 * kMiB);  // ceil(3/2) = 2 granules
  EXPECT_EQ(DevicePool::class_of(4 * kMiB), 4 * kMiB);
  EXPECT_EQ(DevicePool::class_of(4 * kMiB + 1), 6 * kMiB);
  EXPECT_THROW(DevicePool::class_of(0), std::invalid_argument);
}

TEST(DevicePoolClasses, WasteIsBoundedByTheRounding) {
  // Below 1 MiB a class is < 2x its request; above, < one 2 MiB granule more.
  for (std::int64_t bytes = 1; bytes <= 64 * kMiB; bytes = bytes * 3 + 7) {
    const std::int64_t c = DevicePool::class_of(bytes);
    EXPECT_GE(c, bytes);
    if (bytes <= kMiB) {
      EXPECT_LT(c, 2 * bytes + 512) << bytes;  // 512: the minimum class for tiny requests
    } else {
      EXPECT_LT(c - bytes, kPoolLargeGranuleBytes) << bytes;
    }
  }
}

TEST(DevicePoolHost, OverBudgetThrowsTheAccountingsOutOfMemoryBeforeCuda) {
  TierBudgets budgets;
  budgets.device_bytes = 1000;
  AccountingAllocator accounting(budgets);
  DevicePool pool(accounting, /*stream=*/nullptr);
  try {
    (void)pool.allocate(2000, "weights");
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.tier, "device");
    EXPECT_EQ(e.requested_bytes, 2000);
    EXPECT_EQ(e.free_bytes, 1000);  // nothing live yet: the whole budget is free
    EXPECT_NE(std::string(e.what()).find("weights"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.stats().driver_allocations, 0);  // never reached cudaMalloc
  EXPECT_EQ(accounting.usage(MemoryTier::kDevice).current_bytes, 0);
}

TEST(DevicePoolHost, NegativeAndZeroRequests) {
  AccountingAllocator accounting;
  DevicePool pool(accounting, nullptr);
  EXPECT_THROW((void)pool.allocate(-1, "x"), std::invalid_argument);
  DeviceBlock empty = pool.allocate(0, "empty");  // no CUDA call for 0 bytes
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.bytes(), 0);
  EXPECT_EQ(pool.stats().driver_allocations, 0);
}

TEST(PinnedHostHost, OverBudgetThrowsBeforeCuda) {
  TierBudgets budgets;
  budgets.host_bytes = 100;
  AccountingAllocator accounting(budgets);
  try {
    (void)PinnedHostBuffer::allocate(accounting, 200, "staging");
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.tier, "host");
    EXPECT_EQ(e.requested_bytes, 200);
    EXPECT_EQ(e.free_bytes, 100);
  }
  EXPECT_THROW((void)PinnedHostBuffer::allocate(accounting, -5, "x"), std::invalid_argument);
  const PinnedHostBuffer none = PinnedHostBuffer::allocate(accounting, 0, "none");
  EXPECT_EQ(none.data(), nullptr);
}

TEST(CollectiveLayout, TenElementsOverFourRanks) {
  // 10 = 4*2 + 2: the first two blocks get 3 elements, the last two 2 (as MpiCommunicator).
  EXPECT_EQ(block_begin(10, 4, 0), 0);
  EXPECT_EQ(block_begin(10, 4, 1), 3);
  EXPECT_EQ(block_begin(10, 4, 2), 6);
  EXPECT_EQ(block_begin(10, 4, 3), 8);
  EXPECT_EQ(block_begin(10, 4, 4), 10);
  EXPECT_EQ(block_length(10, 4, 0), 3);
  EXPECT_EQ(block_length(10, 4, 3), 2);
  EXPECT_EQ(all_reduce_scratch_elements(10, 4, 0), 12);  // 4 copies of 3
  EXPECT_EQ(all_reduce_scratch_elements(10, 4, 3), 8);   // 4 copies of 2
}

TEST(CollectiveLayout, BlocksTileTheRangeAndDifferByAtMostOne) {
  for (std::int64_t n : {0, 1, 3, 7, 8, 1000, 1001}) {
    for (int s : {1, 2, 3, 4, 8}) {
      std::int64_t covered = 0;
      for (int r = 0; r < s; ++r) {
        EXPECT_EQ(block_begin(n, s, r), covered) << n << " over " << s;
        const std::int64_t len = block_length(n, s, r);
        EXPECT_TRUE(len == n / s || len == n / s + 1) << n << " over " << s;
        covered += len;
      }
      EXPECT_EQ(covered, n);
    }
  }
}

TEST(DeviceProbe, AgreesWithTheRuntimeAndDrivesTheChoice) {
  const DeviceProbe probe = probe_cuda_device();
  EXPECT_EQ(probe.available, kernels::cuda::cuda_device_available());
  if (!probe.available) {
    EXPECT_FALSE(probe.reason.empty());
    EXPECT_EQ(choose_backend(std::nullopt, probe_cuda_device), Backend::kCpu);
    EXPECT_THROW(choose_backend(std::string("cuda"), probe_cuda_device), ConfigError);
  } else {
    EXPECT_EQ(choose_backend(std::nullopt, probe_cuda_device), Backend::kCuda);
  }
}

TEST(SystemErrorTranslation, CudaErrorBecomesSystemErrorWithTheSameText) {
  try {
    as_system_error([] { CUDA_CHECK(cudaErrorInvalidValue); });
    FAIL() << "expected SystemError";
  } catch (const SystemError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaErrorInvalidValue"), std::string::npos) << what;
    EXPECT_NE(what.find("cuda_runtime_host_test.cc"), std::string::npos) << what;
  }
  EXPECT_EQ(as_system_error([] { return 7; }), 7);  // values pass through
}

TEST(NoDevice, StreamsFailWithSystemError) {
  if (kernels::cuda::cuda_device_available()) {
    GTEST_SKIP() << "checks the no-device failure path; this machine has a CUDA device";
  }
  EXPECT_THROW((void)RankStreams::create(), SystemError);
}

#ifdef STRATA_HAVE_NCCL
TEST(NoDevice, NcclSingleRankFailsWithSystemError) {
  if (kernels::cuda::cuda_device_available()) {
    GTEST_SKIP() << "checks the no-device failure path; this machine has a CUDA device";
  }
  EXPECT_THROW((void)NcclCommunicator::create_single(nullptr), SystemError);
}
#endif

}  // namespace
}  // namespace strata::cuda
