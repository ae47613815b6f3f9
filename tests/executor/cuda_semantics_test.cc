// The CUDA-semantics CPU mode's parts on their own (executor/cpu/cuda_semantics): streams run
// lazily and in the order their waits allow, the happens-before checker reports exactly the
// unordered cross-stream touches, and the pool hands a freed block out again at once, NaN
// after its free runs. The whole engine under the mode is the equivalence matrix's second
// pass (engine.cmake: executor_engine_cuda_semantics_*).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "executor/comm/communicator_factory.h"
#include "executor/cpu/cuda_semantics/cuda_semantics_backend.h"
#include "executor/cpu/cuda_semantics/stream_scheduler.h"

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

}  // namespace
}  // namespace strata::cuda_semantics
