// GPU tests of the CUDA backend's runtime: the device pool (zeroing, reuse, accounting peaks,
// driver out-of-memory), pinned host buffers, stream ordering, the rank-ordered sum kernel
// (f32 and bf16), a 1-rank NcclCommunicator (typed), and HostStagedCommunicator's staging over
// an in-process host group (no MPI; the multi-rank cases are cuda_runtime_host_staged_mpi_test).
// Every test GTEST_SKIPs with the reason when no device is present.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "cost_model/specs/errors.h"
#include "executor/cuda/device_pool.h"
#include "executor/cuda/host_staged_communicator.h"
#include "executor/cuda/pinned_host_buffer.h"
#include "executor/cuda/streams.h"
#include "executor/memory/accounting_allocator.h"
#include "kernels/bf16.h"
#include "kernels/cuda/cuda_check.h"
#ifdef STRATA_HAVE_NCCL
#include "executor/cuda/nccl_communicator.h"
#include "executor/cuda/rank_ordered_sum.h"
#endif

namespace strata::cuda {
namespace {

constexpr std::int64_t kMiB = 1024 * 1024;

class CudaRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels::cuda::cuda_device_available()) {
      GTEST_SKIP() << "no CUDA device: " << kernels::cuda::cuda_unavailable_reason();
    }
    streams_ = RankStreams::create();
  }
  template <class T>
  std::vector<T> download(const void* device, std::size_t n) {
    streams_.synchronize_all();
    std::vector<T> host(n);
    CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  template <class T>
  void upload(void* device, const std::vector<T>& host) {
    CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    // A pageable-to-device cudaMemcpy may return before the DMA lands, and the streams here
    // are non-blocking (no implicit order with the legacy stream): wait for the device.
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  RankStreams streams_;
};

TEST_F(CudaRuntimeTest, PoolZeroesAndReusesAFreedBlockOfTheSameClass) {
  AccountingAllocator accounting;
  DevicePool pool(accounting, streams_.compute());
  void* first = nullptr;
  {
    DeviceBlock a = pool.allocate(1000, "a");
    EXPECT_EQ(a.bytes(), 1000);
    EXPECT_EQ(a.class_bytes(), 1024);  // next power of two
    for (unsigned char byte : download<unsigned char>(a.data(), 1000)) ASSERT_EQ(byte, 0);
    first = a.data();
  }
  DeviceBlock b = pool.allocate(700, "b");  // class 1024 again: served from the free list
  EXPECT_EQ(b.data(), first);
  const DevicePoolStats s = pool.stats();
  EXPECT_EQ(s.driver_allocations, 1);
  EXPECT_EQ(s.reuses, 1);
  EXPECT_EQ(s.reserved_bytes, 1024);
  EXPECT_EQ(s.cached_bytes, 0);
  EXPECT_EQ(s.live_blocks, 1);
  DeviceBlock c = pool.allocate(2000, "c");  // class 2048: a new cudaMalloc
  EXPECT_NE(c.data(), first);
  EXPECT_EQ(pool.stats().driver_allocations, 2);
}

TEST_F(CudaRuntimeTest, PoolPeaksAreTheRequestedBytesLikeTheCpuBackend) {
  AccountingAllocator accounting;
  DevicePool pool(accounting, streams_.compute());
  {
    DeviceBlock a = pool.allocate_uninitialized(3 * kMiB, "activations");  // class 4 MiB
    DeviceBlock b = pool.allocate_uninitialized(kMiB, "weights");          // class 1 MiB
    EXPECT_EQ(accounting.usage(MemoryTier::kDevice).current_bytes, 4 * kMiB);
  }
  DeviceBlock c = pool.allocate_uninitialized(100, "grads");  // class 512 B
  // Accounting: peak 3 MiB + 1 MiB requested; now only c's 100 bytes live.
  EXPECT_EQ(accounting.usage(MemoryTier::kDevice).peak_bytes, 4 * kMiB);
  EXPECT_EQ(accounting.usage(MemoryTier::kDevice).current_bytes, 100);
  // Pool: 4 MiB + 1 MiB + 512 B held from the driver, a and b's classes cached.
  const DevicePoolStats s = pool.stats();
  EXPECT_EQ(s.reserved_bytes, 5 * kMiB + 512);
  EXPECT_EQ(s.peak_reserved_bytes, 5 * kMiB + 512);
  EXPECT_EQ(s.cached_bytes, 5 * kMiB);
}

TEST_F(CudaRuntimeTest, PoolDataRoundTrips) {
  AccountingAllocator accounting;
  DevicePool pool(accounting, streams_.compute());
  DeviceBlock block = pool.allocate(4096 * sizeof(float), "x");
  std::vector<float> x(4096);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * static_cast<float>(i) - 7.0f;
  streams_.synchronize_all();  // the zero-fill is ordered on compute; the upload is not
  upload(block.data(), x);
  EXPECT_EQ(download<float>(block.data(), x.size()), x);
}

TEST_F(CudaRuntimeTest, PoolDriverOutOfMemoryNamesTierRequestAndFree) {
  AccountingAllocator accounting;  // unlimited budget: the driver is what refuses
  DevicePool pool(accounting, streams_.compute());
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const auto too_much = static_cast<std::int64_t>(total_bytes) + 2 * kMiB;  // more than exists
  try {
    (void)pool.allocate_uninitialized(too_much, "huge");
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.tier, "device");
    EXPECT_EQ(e.requested_bytes, too_much);
    EXPECT_GT(e.free_bytes, 0);
    EXPECT_LT(e.free_bytes, too_much);
    EXPECT_NE(std::string(e.what()).find("huge"), std::string::npos) << e.what();
  }
  EXPECT_EQ(accounting.usage(MemoryTier::kDevice).current_bytes, 0);  // reservation released
  // The runtime is still usable: the failed cudaMalloc left no sticky error behind.
  DeviceBlock ok = pool.allocate(64, "after");
  EXPECT_FALSE(ok.empty());
}

TEST_F(CudaRuntimeTest, PinnedHostBufferIsZeroedAccountedAndCopiesOnTheCopyStream) {
  AccountingAllocator accounting;
  DevicePool pool(accounting, streams_.compute());
  {
    PinnedHostBuffer pinned = PinnedHostBuffer::allocate(accounting, 1024 * sizeof(float), "stage");
    EXPECT_EQ(accounting.usage(MemoryTier::kHost).current_bytes, 4096);
    float* h = pinned.as<float>();
    for (int i = 0; i < 1024; ++i) ASSERT_EQ(h[i], 0.0f);
    for (int i = 0; i < 1024; ++i) h[i] = static_cast<float>(i);
    DeviceBlock d = pool.allocate_uninitialized(4096, "dev");
    CUDA_CHECK(cudaMemcpyAsync(d.data(), h, 4096, cudaMemcpyHostToDevice, streams_.copy()));
    const std::vector<float> back = download<float>(d.data(), 1024);
    for (int i = 0; i < 1024; ++i) ASSERT_EQ(back[static_cast<std::size_t>(i)], i);
  }
  EXPECT_EQ(accounting.usage(MemoryTier::kHost).current_bytes, 0);
  EXPECT_EQ(accounting.usage(MemoryTier::kHost).peak_bytes, 4096);
}

TEST_F(CudaRuntimeTest, LargePinnedBuffersAreRegisteredZeroedAndCopyBothWays) {
  // Over kRegisteredBytes: fresh pages faulted in on every thread and cudaHostRegistered
  // (issue 38), an odd size (8 MiB + 12 bytes: the last page partly used); zero whichever
  // fill is asked (the kernel's zero pages), and async copies in both directions on the copy
  // stream see the bytes.
  AccountingAllocator accounting;
  DevicePool pool(accounting, streams_.compute());
  const std::int64_t floats = (std::int64_t{8} << 20) / 4 + 3;
  const auto bytes = static_cast<std::size_t>(floats * 4);
  for (Fill fill : {Fill::kZero, Fill::kUninitialized}) {
    PinnedHostBuffer pinned = PinnedHostBuffer::allocate(accounting, floats * 4, "offload", fill);
    EXPECT_TRUE(pinned.registered());
    EXPECT_EQ(accounting.usage(MemoryTier::kHost).current_bytes, floats * 4);
    float* h = pinned.as<float>();
    std::int64_t nonzero = 0;
    for (std::int64_t i = 0; i < floats; ++i) nonzero += h[i] != 0.0f;
    EXPECT_EQ(nonzero, 0);
    for (std::int64_t i = 0; i < floats; ++i) h[i] = static_cast<float>(i % 1000);
    DeviceBlock d = pool.allocate_uninitialized(floats * 4, "dev");
    CUDA_CHECK(cudaMemcpyAsync(d.data(), h, bytes, cudaMemcpyHostToDevice, streams_.copy()));
    CUDA_CHECK(cudaMemsetAsync(d.data(), 0x7f, 4, streams_.copy()));  // element 0 changed
    CUDA_CHECK(cudaMemcpyAsync(h, d.data(), bytes, cudaMemcpyDeviceToHost, streams_.copy()));
    CUDA_CHECK(cudaStreamSynchronize(streams_.copy()));
    EXPECT_NE(h[0], 0.0f);
    for (std::int64_t i = 1; i < floats; ++i) ASSERT_EQ(h[i], static_cast<float>(i % 1000)) << i;
  }
  EXPECT_EQ(accounting.usage(MemoryTier::kHost).current_bytes, 0);
  // Under the threshold: cudaHostAlloc's, not registered.
  EXPECT_FALSE(PinnedHostBuffer::allocate(accounting, 4096, "stage").registered());
}

TEST_F(CudaRuntimeTest, OrderMakesTheWaiterSeeTheProducersWrites) {
  AccountingAllocator accounting;
  DevicePool pool(accounting, streams_.compute());
  constexpr std::size_t kBytes = 64 * kMiB;  // big enough that an unordered copy would race
  DeviceBlock src = pool.allocate_uninitialized(kBytes, "src");
  DeviceBlock dst = pool.allocate_uninitialized(kBytes, "dst");
  CUDA_CHECK(cudaMemset(src.data(), 0, kBytes));
  CUDA_CHECK(cudaMemset(dst.data(), 0, kBytes));
  CUDA_CHECK(cudaDeviceSynchronize());  // cudaMemset may return before it is done
  const StreamEvent event = StreamEvent::create();
  CUDA_CHECK(cudaMemsetAsync(src.data(), 0x5a, kBytes, streams_.copy()));
  RankStreams::order(streams_.compute(), streams_.copy(), event);
  CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), kBytes, cudaMemcpyDeviceToDevice,
                             streams_.compute()));
  const auto out = download<unsigned char>(dst.data(), kBytes);
  for (std::size_t i = 0; i < kBytes; i += 4099) ASSERT_EQ(out[i], 0x5a) << i;
  EXPECT_EQ(out[kBytes - 1], 0x5a);
}

#ifdef STRATA_HAVE_NCCL
TEST_F(CudaRuntimeTest, RankOrderedSumAddsLeftToRight) {
  // Three rows where float addition order matters: (1e8 + 1) rounds to 1e8 (float spacing at
  // 1e8 is 8), so ((1e8 + 1) + -1e8) = 0, while (1e8 + -1e8) + 1 would be 1.
  const std::vector<float> copies = {1e8f, 2.0f, 1.0f, 3.0f, -1e8f, 4.0f};  // (3, 2)
  AccountingAllocator accounting;
  DevicePool pool(accounting, streams_.compute());
  DeviceBlock in = pool.allocate_uninitialized(copies.size() * sizeof(float), "in");
  DeviceBlock out = pool.allocate_uninitialized(2 * sizeof(float), "out");
  streams_.synchronize_all();
  upload(in.data(), copies);
  rank_ordered_sum(in.as<float>(), out.as<float>(), 2, 3, streams_.compute());
  const std::vector<float> got = download<float>(out.data(), 2);
  EXPECT_EQ(got[0], 0.0f);  // the rank order, not 1
  EXPECT_EQ(got[1], 9.0f);  // 2 + 3 + 4, exact
}

TEST_F(CudaRuntimeTest, NcclSingleRankCollectivesAreIdentities) {
  auto comm = NcclCommunicator::create_single(streams_.comm());
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  AccountingAllocator accounting;
  DevicePool pool(accounting, streams_.comm());
  const std::vector<float> x = {1.5f, -2.25f, 3.0f, 1e-30f, 7.0f};
  DeviceBlock a = pool.allocate_uninitialized(5 * sizeof(float), "a");
  DeviceBlock b = pool.allocate(5 * sizeof(float), "b");
  streams_.synchronize_all();
  upload(a.data(), x);
  // One rank: sum, max, reduce-scatter, gather and broadcast all return the input bit for bit.
  comm->all_reduce_sum(a.as<float>(), 5);
  comm->all_reduce_max(a.as<float>(), 5);
  comm->broadcast(a.as<float>(), 5, 0);
  comm->reduce_scatter_sum(a.as<float>(), b.as<float>(), 5);
  comm->synchronize();
  EXPECT_EQ(download<float>(b.data(), 5), x);
  CUDA_CHECK(cudaMemset(b.data(), 0, 5 * sizeof(float)));
  CUDA_CHECK(cudaDeviceSynchronize());
  comm->all_gather(a.as<float>(), b.as<float>(), 5);
  comm->synchronize();
  EXPECT_EQ(download<float>(b.data(), 5), x);

  DeviceBlock counts = pool.allocate_uninitialized(2 * sizeof(std::int64_t), "counts");
  upload(counts.data(), std::vector<std::int64_t>{1LL << 40, -3});
  comm->all_reduce_sum(counts.as<std::int64_t>(), 2);
  EXPECT_EQ(download<std::int64_t>(counts.data(), 2), (std::vector<std::int64_t>{1LL << 40, -3}));
  comm->barrier();
}

TEST_F(CudaRuntimeTest, RankOrderedSumOfBf16AddsInFp32AndRoundsOnce) {
  // Column 0: 1.0 + 2^-8 + 2^-8 = 1 + 2^-7 in fp32, exact in bf16 (spacing 2^-7 at 1.0); a
  // per-addition bf16 rounding would give 1.0 (1 + 2^-8 is a tie, rounded to even 1.0, twice).
  // Column 1: 256 + 1 + 1 = 258 (spacing 2 at 256); per addition: 256. Columns 2..: hashed
  // values of both signs, checked bit for bit against the host's fp32 sum rounded once
  // (kernels/bf16.h), the MPI backend's arithmetic.
  constexpr int kRanks = 3;
  constexpr std::int64_t kM = 4099;
  std::vector<Bf16Bits> copies(static_cast<std::size_t>(kRanks * kM));
  auto at = [&](int r, std::int64_t i) -> Bf16Bits& {
    return copies[static_cast<std::size_t>(r * kM + i)];
  };
  for (int r = 0; r < kRanks; ++r) {
    at(r, 0) = float_to_bf16(r == 0 ? 1.0f : 0.00390625f);
    at(r, 1) = float_to_bf16(r == 0 ? 256.0f : 1.0f);
    for (std::int64_t i = 2; i < kM; ++i) {
      const float x = static_cast<float>((i * 7919 + r * 104729) % 2001 - 1000) / 37.0f;
      at(r, i) = float_to_bf16(x);
    }
  }
  AccountingAllocator accounting;
  DevicePool pool(accounting, streams_.compute());
  DeviceBlock in = pool.allocate_uninitialized(copies.size() * sizeof(Bf16Bits), "in");
  DeviceBlock out = pool.allocate_uninitialized(kM * sizeof(Bf16Bits), "out");
  streams_.synchronize_all();
  upload(in.data(), copies);
  rank_ordered_sum(in.as<Bf16Bits>(), out.as<Bf16Bits>(), kM, kRanks, streams_.compute());
  const std::vector<Bf16Bits> got = download<Bf16Bits>(out.data(), kM);
  EXPECT_EQ(bf16_to_float(got[0]), 1.0078125f);  // 1 + 2^-7, not 1.0
  EXPECT_EQ(bf16_to_float(got[1]), 258.0f);      // not 256
  std::int64_t mismatches = 0;
  std::int64_t first_bad = -1;
  for (std::int64_t i = 0; i < kM; ++i) {
    float sum = bf16_to_float(at(0, i));
    for (int r = 1; r < kRanks; ++r) sum += bf16_to_float(at(r, i));
    if (got[static_cast<std::size_t>(i)].bits != float_to_bf16(sum).bits) {
      if (first_bad < 0) first_bad = i;
      ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0) << "first differing element " << first_bad;
}

TEST_F(CudaRuntimeTest, NcclSingleRankTypedCollectivesAreIdentities) {
  auto comm = NcclCommunicator::create_single(streams_.comm());
  AccountingAllocator accounting;
  DevicePool pool(accounting, streams_.comm());
  const std::vector<Bf16Bits> x = {float_to_bf16(1.5f), float_to_bf16(-2.25f),
                                   float_to_bf16(3.0e-30f), Bf16Bits{0x7f80}};  // +inf too
  DeviceBlock a = pool.allocate_uninitialized(4 * sizeof(Bf16Bits), "a");
  DeviceBlock b = pool.allocate(4 * sizeof(Bf16Bits), "b");
  streams_.synchronize_all();
  upload(a.data(), x);
  comm->all_reduce_sum(a.data(), 4, DType::kBF16);
  comm->all_reduce_max(a.as<Bf16Bits>(), 4);
  comm->reduce_scatter_sum(a.as<Bf16Bits>(), b.as<Bf16Bits>(), 4);
  comm->synchronize();
  const std::vector<Bf16Bits> got = download<Bf16Bits>(b.data(), 4);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i].bits, x[i].bits) << i;
  DeviceBlock ids = pool.allocate_uninitialized(2 * sizeof(std::int32_t), "ids");
  upload(ids.data(), std::vector<std::int32_t>{-7, 1 << 30});
  comm->broadcast(ids.as<std::int32_t>(), 2, 0);
  comm->all_gather(ids.data(), ids.data(), 2, DType::kI32);  // in place: one rank, one row
  comm->synchronize();
  EXPECT_EQ(download<std::int32_t>(ids.data(), 2), (std::vector<std::int32_t>{-7, 1 << 30}));
  EXPECT_THROW(comm->all_reduce_sum(ids.data(), 2, DType::kI32), std::invalid_argument);
  EXPECT_THROW(comm->all_gather(ids.data(), ids.data(), 2, static_cast<DType>(42)),
               std::invalid_argument);
  comm->synchronize();
}

TEST_F(CudaRuntimeTest, NcclRejectsBadArgumentsBeforeEnqueuing) {
  auto comm = NcclCommunicator::create_single(streams_.comm());
  float* never = nullptr;  // not dereferenced: every call below fails its checks first
  EXPECT_THROW(comm->all_reduce_sum(never, -1), std::invalid_argument);
  EXPECT_THROW(comm->broadcast(never, 4, 1), std::invalid_argument);   // root 1 of 1 rank
  EXPECT_THROW((void)comm->send(never, 4, 0, 0), std::invalid_argument);  // self
  EXPECT_THROW(comm->recv(never, 4, 3, 0), std::invalid_argument);     // peer 3 of 1 rank
  EXPECT_THROW(comm->send_recv(never, never, 4, -1), std::invalid_argument);
  comm->synchronize();
}
#endif

// A host group that stands for two ranks holding the same data, in one process: sums double
// every element (x + x, exact for these inputs, bf16 added in fp32 and rounded once), max and
// broadcast keep it, all_gather writes two copies, reduce_scatter sums row 0 with itself, and
// point-to-point loops back through a per-tag queue. Enough to see each HostStaged operation
// carry the data device -> host op -> device, without MPI.
class MirrorPair final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void do_all_reduce_sum(void* data, std::int64_t n, DType t) override {
    require_reducible(t, "MirrorPair", "all_reduce_sum");
    double_in_place(data, n, t);
  }
  void do_all_reduce_max(void* /*data*/, std::int64_t /*n*/, DType t) override {
    require_reducible(t, "MirrorPair", "all_reduce_max");
  }
  void do_reduce_scatter_sum(const void* in, void* out, std::int64_t n, DType t) override {
    require_reducible(t, "MirrorPair", "reduce_scatter_sum");
    std::memcpy(out, in, bytes(n, t));  // my row, from both "ranks"
    double_in_place(out, n, t);
  }
  void do_all_gather(const void* in, void* out, std::int64_t n, DType t) override {
    std::memcpy(out, in, bytes(n, t));
    std::memcpy(static_cast<std::byte*>(out) + bytes(n, t), in, bytes(n, t));
  }
  void do_broadcast(void* /*data*/, std::int64_t /*n*/, DType /*t*/, int /*root*/) override {}
  Request do_send(const void* data, std::int64_t n, DType t, int /*peer*/, int tag) override {
    const auto* p = static_cast<const std::byte*>(data);
    queues_[tag].emplace_back(p, p + bytes(n, t));
    return Request();
  }
  void do_recv(void* data, std::int64_t n, DType t, int /*peer*/, int tag) override {
    std::deque<std::vector<std::byte>>& q = queues_.at(tag);
    ASSERT_EQ(q.front().size(), bytes(n, t));
    std::memcpy(data, q.front().data(), q.front().size());
    q.pop_front();
  }
  Request do_irecv(void* data, std::int64_t n, DType t, int peer, int tag) override {
    recv(data, n, t, peer, tag);  // the loopback message is already queued
    return Request();
  }
  void barrier() override {}

 private:
  static std::size_t bytes(std::int64_t n, DType t) {
    return static_cast<std::size_t>(n * dtype_bytes(t));
  }
  static void double_in_place(void* data, std::int64_t n, DType t) {
    for (std::int64_t i = 0; i < n; ++i) {
      if (t == DType::kF32) {
        static_cast<float*>(data)[i] *= 2.0f;
      } else if (t == DType::kBF16) {
        Bf16Bits& b = static_cast<Bf16Bits*>(data)[i];
        b = float_to_bf16(bf16_to_float(b) + bf16_to_float(b));
      } else if (t == DType::kF64) {
        static_cast<double*>(data)[i] *= 2.0;
      } else {
        static_cast<std::int64_t*>(data)[i] *= 2;
      }
    }
  }
  std::map<int, std::deque<std::vector<std::byte>>> queues_;
};

TEST_F(CudaRuntimeTest, HostStagedCarriesEveryOperationThroughTheHostGroup) {
  HostStagedCommunicator comm(std::make_unique<MirrorPair>(), streams_.comm());
  EXPECT_EQ(comm.size(), 2);
  AccountingAllocator accounting;
  DevicePool pool(accounting, streams_.comm());
  // Sizes from one element to 3 MiB of bf16 and back: the staging pool grows, is reused, and
  // every result is the host group's (2x, exact: small integers over 8).
  for (std::int64_t n : {1, 1 << 20, 5, 3 << 19, 7}) {
    std::vector<Bf16Bits> x(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      x[static_cast<std::size_t>(i)] = float_to_bf16(static_cast<float>(i % 251 - 125) / 8.0f);
    }
    DeviceBlock d = pool.allocate_uninitialized(x.size() * sizeof(Bf16Bits), "x");
    streams_.synchronize_all();
    upload(d.data(), x);
    comm.all_reduce_sum(d.as<Bf16Bits>(), n);
    const std::vector<Bf16Bits> got = download<Bf16Bits>(d.data(), x.size());
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const float want = 2.0f * bf16_to_float(x[static_cast<std::size_t>(i)]);
      bad += bf16_to_float(got[static_cast<std::size_t>(i)]) != want ? 1 : 0;
    }
    EXPECT_EQ(bad, 0) << n;
  }
  // reduce_scatter: in (2, 3) -> my row doubled; all_gather: (3) -> (2, 3).
  DeviceBlock in = pool.allocate_uninitialized(6 * sizeof(float), "in");
  DeviceBlock out = pool.allocate(3 * sizeof(float), "out");
  streams_.synchronize_all();
  upload(in.data(), std::vector<float>{1.5f, -2.0f, 0.25f, 9.0f, 9.0f, 9.0f});
  comm.reduce_scatter_sum(in.as<float>(), out.as<float>(), 3);
  EXPECT_EQ(download<float>(out.data(), 3), (std::vector<float>{3.0f, -4.0f, 0.5f}));
  DeviceBlock gathered = pool.allocate(6 * sizeof(float), "gathered");
  streams_.synchronize_all();
  comm.all_gather(out.as<float>(), gathered.as<float>(), 3);
  EXPECT_EQ(download<float>(gathered.data(), 6),
            (std::vector<float>{3.0f, -4.0f, 0.5f, 3.0f, -4.0f, 0.5f}));
  // send stages the data before it returns: overwriting the device buffer afterwards does
  // not change the message; irecv's Request puts it on the device when waited for.
  DeviceBlock msg = pool.allocate_uninitialized(2 * sizeof(std::int32_t), "msg");
  DeviceBlock got = pool.allocate(2 * sizeof(std::int32_t), "got");
  streams_.synchronize_all();
  upload(msg.data(), std::vector<std::int32_t>{42, -42});
  Request sent = comm.send(msg.as<std::int32_t>(), 2, 1, 3);
  CUDA_CHECK(cudaMemset(msg.data(), 0, 2 * sizeof(std::int32_t)));
  CUDA_CHECK(cudaDeviceSynchronize());
  Request received = comm.irecv(got.as<std::int32_t>(), 2, 1, 3);
  received.wait();
  sent.wait();
  EXPECT_EQ(download<std::int32_t>(got.data(), 2), (std::vector<std::int32_t>{42, -42}));
  // Rejected before any copy: i32 sums, negative counts.
  EXPECT_THROW(comm.all_reduce_sum(got.data(), 2, DType::kI32), std::invalid_argument);
  EXPECT_THROW(comm.all_reduce_sum(got.data(), -1, DType::kF32), std::invalid_argument);
  comm.barrier();
}

}  // namespace
}  // namespace strata::cuda
