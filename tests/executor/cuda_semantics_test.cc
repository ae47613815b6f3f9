// The CUDA-semantics CPU mode's parts on their own (executor/cpu/cuda_semantics): streams run
// lazily and in the order their waits allow, the happens-before checker reports exactly the
// unordered cross-stream touches, the pool hands a freed block out again at once to any
// request of its size class, NaN after its free runs, and the host is an actor whose work on
// pinned memory races with the copies it has not waited for (the host-side planted faults). The whole engine under the mode is the equivalence matrix's second
// pass (engine.cmake: executor_engine_cuda_semantics_*).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "executor/comm/communicator_factory.h"
#include "executor/cpu/cuda_semantics/cuda_semantics_backend.h"
#include "executor/cpu/cuda_semantics/stream_scheduler.h"
#include "executor/engine/offload_tiers.h"
#include "executor/memory/pool_size_class.h"

namespace strata::cuda_semantics {
namespace {

using Log = std::vector<std::string>;

TEST(StreamScheduler, QueuedWorkRunsOnlyWhenTheHostWaitsForItsStream) {
  StreamScheduler s;
  Log log;
  s.enqueue(SimStream::kCompute, "a", {}, [&] { log.push_back("a"); });
  s.enqueue(SimStream::kComm, "b", {}, [&] { log.push_back("b"); });
  EXPECT_TRUE(log.empty());
  s.host_wait(SimStream::kComm);  // only comm's work: compute's stays queued
  EXPECT_EQ(log, (Log{"b"}));
  s.synchronize();
  EXPECT_EQ(log, (Log{"b", "a"}));
  EXPECT_TRUE(s.idle());
}

TEST(StreamScheduler, AWaitRunsTheMarkedWorkFirstAndNothingIssuedAfterTheMark) {
  StreamScheduler s;
  Log log;
  s.enqueue(SimStream::kCompute, "c1", {}, [&] { log.push_back("c1"); });
  const auto mark = s.record(SimStream::kCompute);
  s.enqueue(SimStream::kCompute, "c2", {}, [&] { log.push_back("c2"); });
  s.wait(SimStream::kP2p, mark);
  s.run_now(SimStream::kP2p, "recv", {}, [&] { log.push_back("recv"); });
  // The receive ran at once, after c1 (its wait) and before c2 (issued after the mark).
  EXPECT_EQ(log, (Log{"c1", "recv"}));
  s.synchronize();
  EXPECT_EQ(log, (Log{"c1", "recv", "c2"}));
}

TEST(StreamScheduler, AnUnorderedWriteAfterAReadOnAnotherStreamIsARaceNamingBoth) {
  StreamScheduler s;
  std::vector<float> block(16);
  s.checker().add_block(block.data(), 64, "pipeline_recv");
  s.enqueue(SimStream::kCompute, "matmul_backward", {Access{block.data(), 64, false}}, [] {});
  try {
    s.run_now(SimStream::kLinkRecv0, "recv", {Access{block.data() + 8, 32, true}}, [] {});
    FAIL() << "no race reported";
  } catch (const StreamRace& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'pipeline_recv'"), std::string::npos) << m;
    EXPECT_NE(m.find("recv on the pipeline receive link 0 stream"), std::string::npos) << m;
    EXPECT_NE(m.find("matmul_backward on the compute stream"), std::string::npos) << m;
    EXPECT_NE(m.find("bytes [32, 64)"), std::string::npos) << m;
  }
}

TEST(StreamScheduler, OrderedOrDisjointOrReadOnlyTouchesAreNoRace) {
  StreamScheduler s;
  std::vector<float> block(16);
  s.checker().add_block(block.data(), 64, "act");
  s.enqueue(SimStream::kCompute, "write low half", {Access{block.data(), 32, true}}, [] {});
  // Another stream's write of the other half: disjoint.
  EXPECT_NO_THROW(s.enqueue(SimStream::kComm, "write high half", {Access{block.data() + 8, 32, true}}, [] {}));
  // Reads of the low half from a stream that waited for compute: ordered.
  s.wait(SimStream::kCopy, s.record(SimStream::kCompute));
  EXPECT_NO_THROW(s.enqueue(SimStream::kCopy, "read low", {Access{block.data(), 32, false}}, [] {}));
  // Two reads ordered after the write but not with each other: no conflict.
  s.wait(SimStream::kCompute, s.record(SimStream::kComm));
  s.enqueue(SimStream::kCompute, "read high", {Access{block.data() + 8, 32, false}}, [] {});
  s.wait(SimStream::kP2p, s.record(SimStream::kComm));
  EXPECT_NO_THROW(s.enqueue(SimStream::kP2p, "read high too", {Access{block.data() + 8, 32, false}}, [] {}));
  // The host waited for every stream that touched the block: whatever it launches next is
  // ordered after all of it.
  for (SimStream t : {SimStream::kCompute, SimStream::kComm, SimStream::kCopy, SimStream::kP2p}) {
    s.host_wait(t);
  }
  EXPECT_NO_THROW(s.enqueue(SimStream::kLinkSend0, "overwrite", {Access{block.data(), 64, true}}, [] {}));
  s.synchronize();
}

TEST(StreamScheduler, OrderingIsTransitiveThroughAThirdStream) {
  StreamScheduler s;
  std::vector<float> block(4);
  s.checker().add_block(block.data(), 16, "grads");
  s.enqueue(SimStream::kCompute, "backward", {Access{block.data(), 16, true}}, [] {});
  s.wait(SimStream::kComm, s.record(SimStream::kCompute));
  s.enqueue(SimStream::kComm, "reduce", {Access{block.data(), 16, false}}, [] {});
  s.wait(SimStream::kCopy, s.record(SimStream::kComm));
  // copy waited for comm, which waited for compute: ordered after the backward.
  EXPECT_NO_THROW(s.enqueue(SimStream::kCopy, "offload", {Access{block.data(), 16, true}}, [] {}));
  s.synchronize();
}

// A factory that makes no groups: the backend's pool needs none.
class NoGroups final : public CommunicatorFactory {
 public:
  int world_rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::unique_ptr<Communicator> split(GroupKind, int, int) override { return nullptr; }
};

TEST(CudaSemanticsBackend, AFreedBlockIsHandedOutAgainAtOnceAndIsNanOnceItsFreeRuns) {
  AccountingAllocator alloc(TierBudgets{});
  NoGroups groups;
  CudaSemanticsBackend backend(alloc, groups);
  engine::Tensor a = backend.allocate(MemoryTier::kDevice, DType::kF32, 8, "a", /*zeroed=*/true);
  void* address = a.data();
  backend.host_wait(Stream::kCompute);  // the zero fill ran
  EXPECT_EQ(a.f32()[3], 0.0f);
  a.reset();  // freed in compute order: its NaN fill is queued
  engine::Tensor b = backend.allocate(MemoryTier::kDevice, DType::kF32, 8, "b", /*zeroed=*/false);
  EXPECT_EQ(b.data(), address);  // the last freed block of that size, at once
  backend.host_wait(Stream::kCompute);
  EXPECT_TRUE(std::isnan(b.f32()[3]));
}

TEST(CudaSemanticsBackend, AReusedBlockWrittenFromAnotherStreamBeforeTheComputeStreamIsDoneIsARace) {
  AccountingAllocator alloc(TierBudgets{});
  NoGroups groups;
  CudaSemanticsBackend backend(alloc, groups);
  engine::Tensor grad = backend.allocate(MemoryTier::kDevice, DType::kF32, 8, "pass_grad", false);
  engine::Tensor out = backend.allocate(MemoryTier::kDevice, DType::kF32, 8, "out", false);
  backend.layer_ops().copy(out.data(), grad.data(), 8);  // queued: reads pass_grad later
  grad.reset();
  engine::Tensor received = backend.allocate(MemoryTier::kDevice, DType::kF32, 8, "pipeline_recv", false);
  // A copy stream write into the reused block with no wait for compute: the engine's bug.
  EXPECT_THROW(backend.zero(received.data(), DType::kF32, 8, Stream::kCopy), StreamRace);
}

TEST(CudaSemanticsBackend, TheSameReuseAfterAWaitForComputeIsNoRace) {
  AccountingAllocator alloc(TierBudgets{});
  NoGroups groups;
  CudaSemanticsBackend backend(alloc, groups);
  engine::Tensor grad = backend.allocate(MemoryTier::kDevice, DType::kF32, 8, "pass_grad", false);
  engine::Tensor out = backend.allocate(MemoryTier::kDevice, DType::kF32, 8, "out", false);
  backend.layer_ops().copy(out.data(), grad.data(), 8);
  grad.reset();
  engine::Tensor received = backend.allocate(MemoryTier::kDevice, DType::kF32, 8, "pipeline_recv", false);
  backend.wait(Stream::kCopy, backend.record(Stream::kCompute));
  EXPECT_NO_THROW(backend.zero(received.data(), DType::kF32, 8, Stream::kCopy));
  backend.synchronize();
}

TEST(CudaSemanticsBackend, AFreedBlockGoesToAnyRequestOfItsSizeClassAsOnTheGpu) {
  AccountingAllocator alloc(TierBudgets{});
  NoGroups groups;
  CudaSemanticsBackend backend(alloc, groups);
  // 65,536 floats = 256 KiB (a LayerNorm-backward partials block of the tiny GPU model) and
  // 40,000 floats = 160,000 B are both in the 256 KiB class (powers of two up to 1 MiB), so
  // the CUDA pool hands the first's block to the second; the mode must too.
  ASSERT_EQ(pool_size_class(65536 * 4), pool_size_class(40000 * 4));
  engine::Tensor partials = backend.allocate(MemoryTier::kDevice, DType::kF32, 65536, "ln_partials", false);
  void* address = partials.data();
  partials.reset();
  engine::Tensor shard = backend.allocate(MemoryTier::kDevice, DType::kF32, 40000, "shard", false);
  EXPECT_EQ(shard.data(), address);
  // One class up (300,000 B -> 512 KiB): a block of its own.
  engine::Tensor bigger = backend.allocate(MemoryTier::kDevice, DType::kF32, 75000, "bigger", false);
  EXPECT_NE(bigger.data(), address);
  backend.synchronize();
}

std::string race_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const StreamRace& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CudaSemanticsHost, HostWorkReadingACopysPinnedDestinationBeforeItsMarkIsARace) {
  // Planted fault: the wait dropped before the host optimizer reads a gradient that came down.
  AccountingAllocator alloc(TierBudgets{});
  NoGroups groups;
  CudaSemanticsBackend backend(alloc, groups);
  engine::Tensor grad = backend.allocate(MemoryTier::kDevice, DType::kF32, 16, "gradients", true);
  engine::Tensor down = backend.allocate(MemoryTier::kHost, DType::kF32, 16, "offload:gradients", false);
  backend.wait(Stream::kCopy, backend.record(Stream::kCompute));
  backend.copy_async(down.data(), grad.data(), 64, Stream::kCopy);
  const std::string race = race_of([&] {
    backend.on_host("CPU AdamW of layer.0", {engine::host_reads(down.data(), 64)}, [] {});
  });
  EXPECT_TRUE(has(race, "pinned host block 'offload:gradients'")) << race;
  EXPECT_TRUE(has(race, "CPU AdamW of layer.0 on the host")) << race;
  EXPECT_TRUE(has(race, "copy_async on the copy stream")) << race;
  backend.synchronize();
}

TEST(CudaSemanticsHost, TheSameReadAfterTheHostWaitsForTheCopysMarkIsNoRaceAndSeesTheData) {
  AccountingAllocator alloc(TierBudgets{});
  NoGroups groups;
  CudaSemanticsBackend backend(alloc, groups);
  engine::Tensor grad = backend.allocate(MemoryTier::kDevice, DType::kF32, 16, "gradients", true);
  engine::Tensor down = backend.allocate(MemoryTier::kHost, DType::kF32, 16, "offload:gradients", false);
  down.f32()[3] = 7.0f;
  backend.wait(Stream::kCopy, backend.record(Stream::kCompute));
  backend.copy_async(down.data(), grad.data(), 64, Stream::kCopy);
  // Not yet run: the copy is queued until something waits for it (the latest CUDA allows).
  EXPECT_EQ(down.f32()[3], 7.0f);
  backend.host_wait_for(backend.record(Stream::kCopy));
  float seen = -1;
  EXPECT_NO_THROW(backend.on_host("read", {engine::host_reads(down.data(), 64)},
                                  [&] { seen = down.f32()[3]; }));
  EXPECT_EQ(seen, 0.0f);  // the zeroed device gradient
  backend.synchronize();
}

TEST(CudaSemanticsHost, APinnedStagingBufferFreedBeforeItsCopyIsDoneIsARace) {
  // Planted fault: a pinned staging buffer reused (freed: its allocator may hand it out at
  // once) while the H2D copy that reads it is still queued.
  AccountingAllocator alloc(TierBudgets{});
  NoGroups groups;
  CudaSemanticsBackend backend(alloc, groups);
  engine::Tensor params = backend.allocate(MemoryTier::kDevice, DType::kF32, 16, "params", false);
  engine::Tensor staging = backend.allocate(MemoryTier::kHost, DType::kF32, 16, "offload:param_staging", true);
  backend.wait(Stream::kCopy, backend.record(Stream::kCompute));
  backend.copy_async(params.data(), staging.data(), 64, Stream::kCopy);
  staging.reset();
  const std::string race = race_of([&] { backend.host_wait(Stream::kCompute); });
  EXPECT_TRUE(has(race, "free of 'offload:param_staging' on the host")) << race;
  EXPECT_TRUE(has(race, "copy_async on the copy stream")) << race;
  backend.synchronize();
}

TEST(CudaSemanticsHost, AnNvmeReadIntoABufferACopyStillReadsIsARace) {
  // Planted fault: an NVMe read (OffloadLinks, as the fetcher and the gradient tier use it)
  // into a pinned buffer whose H2D copy has not been waited for.
  AccountingAllocator alloc(TierBudgets{});
  NoGroups groups;
  CudaSemanticsBackend backend(alloc, groups);
  engine::OffloadOptions options;
  options.nvme_dir = std::filesystem::temp_directory_path() /
                     ("strata-cuda-semantics-nvme-" + std::to_string(::getpid()));
  engine::OffloadLinks links(OffloadPlan{OffloadTier::kNvme, OffloadTier::kNone, OffloadTier::kNone},
                             options, backend);
  links.store().create("adam_m.layer.0", 1024);
  engine::Tensor device = backend.allocate(MemoryTier::kDevice, DType::kF32, 1024, "optimizer", false);
  engine::Tensor buffer = backend.allocate(MemoryTier::kHost, DType::kF32, 1024, "offload:optimizer", true);
  links.host_to_device_async(device.f32(), buffer.f32(), 1024);
  const std::string race = race_of([&] { links.nvme_to_host("adam_m.layer.0", buffer.f32(), 1024); });
  EXPECT_TRUE(has(race, "nvme read of 'adam_m.layer.0' on the host")) << race;
  EXPECT_TRUE(has(race, "copy_async on the copy stream")) << race;
  // Waiting for the copy's mark first: no race.
  backend.host_wait_for(backend.record(Stream::kCopy));
  EXPECT_NO_THROW(links.nvme_to_host("adam_m.layer.0", buffer.f32(), 1024));
  backend.synchronize();
}

TEST(CudaSemanticsHost, ACopyFromPageableMemoryIsStagedOnTheCallAndIntoPageableMemoryWaits) {
  // cudaMemcpyAsync's rules for pageable host memory: the source is copied to staging before
  // the call returns (the host may overwrite it at once and the device still gets the old
  // values); a destination in pageable memory is written before the call returns.
  AccountingAllocator alloc(TierBudgets{});
  NoGroups groups;
  CudaSemanticsBackend backend(alloc, groups);
  engine::Tensor device = backend.allocate(MemoryTier::kDevice, DType::kF32, 4, "act", false);
  std::vector<float> pageable{1, 2, 3, 4};
  backend.copy_async(device.data(), pageable.data(), 16, Stream::kCopy);
  pageable.assign({9, 9, 9, 9});
  std::vector<float> back(4, -1.0f);
  backend.copy_async(back.data(), device.data(), 16, Stream::kCopy);
  EXPECT_EQ(back, (std::vector<float>{1, 2, 3, 4}));
  backend.synchronize();
}

// Stream capture (CUDA graphs): recorded work runs only at a launch, each launch runs it again
// in its recorded order across streams, and the host may not wait while capturing.
TEST(StreamCapture, RecordedWorkRunsAtEachLaunchInItsOrderAcrossStreams) {
  StreamScheduler s;
  Log log;
  s.begin_capture();
  s.enqueue(SimStream::kCompute, "a", {}, [&] { log.push_back("a"); });
  s.wait(SimStream::kComm, s.record(SimStream::kCompute));
  s.enqueue(SimStream::kComm, "b", {}, [&] { log.push_back("b"); });
  s.wait(SimStream::kCompute, s.record(SimStream::kComm));
  s.enqueue(SimStream::kCompute, "c", {}, [&] { log.push_back("c"); });
  s.end_capture();
  EXPECT_TRUE(log.empty());  // captured, not run
  EXPECT_TRUE(s.idle());
  s.launch();
  s.host_wait(SimStream::kCompute);  // c waits for b, which waits for a
  EXPECT_EQ(log, (Log{"a", "b", "c"}));
  s.launch();
  s.synchronize();
  EXPECT_EQ(log, (Log{"a", "b", "c", "a", "b", "c"}));
}

TEST(StreamCapture, AHostWaitOrHostWorkWhileCapturingIsRefused) {
  StreamScheduler s;
  s.begin_capture();
  s.enqueue(SimStream::kCompute, "norm", {}, [] {});
  const std::string wait = race_of([&] { s.host_wait(SimStream::kCompute); });
  EXPECT_TRUE(has(wait, "host wait for the compute stream during stream capture")) << wait;
  const std::string work = race_of([&] { s.host_op("CPU AdamW", {}, [] {}); });
  EXPECT_TRUE(has(work, "host work (CPU AdamW) during stream capture")) << work;
  s.end_capture();
}

TEST(StreamCapture, APageableCopyIsRefusedWhileCapturing) {
  // The tokens of a step issued op by op come from a std::vector: CUDA stages such a copy
  // through the host and waits for it, which a capture may not.
  AccountingAllocator alloc(TierBudgets{});
  NoGroups groups;
  CudaSemanticsBackend backend(alloc, groups, /*capture_steps=*/true);
  engine::Tensor device = backend.allocate(MemoryTier::kDevice, DType::kI32, 64, "data", false);
  const std::vector<std::int32_t> tokens(64, 7);
  backend.begin_capture();
  const std::string race =
      race_of([&] { backend.copy(device.data(), tokens.data(), device.bytes(), Stream::kCompute); });
  EXPECT_TRUE(has(race, "during stream capture")) << race;
  backend.end_capture();
  backend.drop_graph();
}

TEST(StreamCapture, TheFreeBlocksAreThePoolsCachedBlocksSorted) {
  AccountingAllocator alloc(TierBudgets{});
  NoGroups groups;
  CudaSemanticsBackend backend(alloc, groups, /*capture_steps=*/true);
  engine::Tensor a = backend.allocate(MemoryTier::kDevice, DType::kF32, 256, "a", false);
  engine::Tensor b = backend.allocate(MemoryTier::kDevice, DType::kF32, 256, "b", false);
  EXPECT_TRUE(backend.free_blocks().empty());
  std::vector<FreeBlock> both{{a.data(), 1024}, {b.data(), 1024}};  // 256 floats: class 1 KiB
  std::sort(both.begin(), both.end());
  a.reset();
  b.reset();
  EXPECT_EQ(backend.free_blocks(), both);
  // Taken and given back in the other order: the same free blocks.
  engine::Tensor first = backend.allocate(MemoryTier::kDevice, DType::kF32, 256, "c", false);
  engine::Tensor second = backend.allocate(MemoryTier::kDevice, DType::kF32, 256, "d", false);
  first.reset();
  EXPECT_EQ(backend.free_blocks().size(), 1u);  // one still held
  second.reset();
  EXPECT_EQ(backend.free_blocks(), both);
  backend.synchronize();
}

}  // namespace
}  // namespace strata::cuda_semantics
