// Offload plans under the CPU backend's CUDA-semantics mode, one rank: the CUDA backend's
// buffers and casts (a compute copy apart from the fp32 master), its pool's size classes and
// the host as an actor run, and
// - every offload tier trains to the plain CPU backend's losses and norms bit for bit (the
//   mode's casts are fp32 copies, so ordering is the only thing it may change);
// - the faults behind the H200's NaN, planted into the real code path through a backend that
//   drops one ordering, are each named by the happens-before checker: the ZeRO-3 gather's
//   cast issued on the compute stream, ordered with neither the fetch's copy nor the DP
//   all-gather (what the GPU ran), and the host's wait for a gradient shard's copy dropped
//   before the host adds the shard in;
// - with clipping on, the host AdamW of a plan whose ZeRO-3 state is all in host memory runs
//   as the CUDA backend runs it, as host functions on a stream of their own carried into the
//   next step (program.h, "carried"), to the same bits; the next step's fetch that does not
//   wait for a unit's carried update is named, and so is host work on that stream that makes
//   a CUDA call (which a CUDA host function may not).
// The multi-rank offload plans run under the mode in the equivalence matrix
// (engine.cmake: executor_engine_cuda_semantics_*_cpu / _nvme).
#include <gtest/gtest.h>
#include <mpi.h>

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "executor/comm/communicator_factory.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/cpu/cuda_semantics/cuda_semantics_backend.h"
#include "executor/data/corpus.h"
#include "tests/executor/engine_test_support.h"

namespace strata::offload_cuda_semantics_test {
namespace {

using testing_support::make_plan;

enum class Fault { kNone, kCastUnordered, kNoHostWait, kCarriedUnwaited, kDeviceWorkOnHostStream };

// The CUDA-semantics backend with one ordering taken out.
class PlantedFaultBackend final : public cuda_semantics::CudaSemanticsBackend {
 public:
  PlantedFaultBackend(AccountingAllocator& alloc, CommunicatorFactory& host, Fault fault)
      : CudaSemanticsBackend(alloc, host), fault_(fault) {}

  void wait(Stream waiter, int mark) override {
    // A device stream's wait for the host stream's work (the next step's fetch for the
    // carried update of its unit) dropped.
    const bool host_mark = mark >= kHostMarkBase;
    if (fault_ == Fault::kCarriedUnwaited && waiter != Stream::kHost && host_mark) return;
    CudaSemanticsBackend::wait(waiter, mark);
  }
  // Host work that copies to and from the device sent to the host-function stream too.
  bool host_stream_host_memory_only() const override {
    return fault_ != Fault::kDeviceWorkOnHostStream;
  }
  void to_compute(void* dst, const float* src, std::int64_t n, Stream stream) override {
    CudaSemanticsBackend::to_compute(dst, src, n,
                                     fault_ == Fault::kCastUnordered ? Stream::kCompute : stream);
  }
  void wait(Communicator& comm, int mark) override {
    if (fault_ != Fault::kCastUnordered) CudaSemanticsBackend::wait(comm, mark);
  }
  void host_wait_for(int mark) override {
    if (fault_ != Fault::kNoHostWait) CudaSemanticsBackend::host_wait_for(mark);
  }

 private:
  Fault fault_;
};

engine::BackendMaker backend_with(Fault fault) {
  return [fault](AccountingAllocator& alloc,
                 const engine::RankPlace& place) -> std::unique_ptr<engine::Backend> {
    return std::make_unique<PlantedFaultBackend>(alloc, *place.host, fault);
  };
}

Plan offloaded(int zero, OffloadTier optimizer, OffloadTier gradients, OffloadTier params) {
  // micro-batch 2 of the global batch 8: 4 micro-batches, so every layer's gradient shard
  // goes down 4 times a step and is added into the host sum 3 times.
  Plan plan = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, zero, 2);
  plan.offload = OffloadPlan{optimizer, gradients, params};
  return plan;
}

testing_support::StepValues train(const Plan& plan, const engine::BackendMaker& backend,
                                  double grad_clip = 0) {
  auto self = MpiCommunicator::duplicate(MPI_COMM_SELF);
  TrainSpec spec = testing_support::tiny_train();
  spec.optimizer.grad_clip = grad_clip;
  const auto corpus = data::generated_corpus(spec.seed, 1 << 16);
  return testing_support::run_steps(testing_support::tiny_model(), spec, plan, *self, 3, corpus,
                                    backend);
}

std::string failure_of(const Plan& plan, Fault fault, double grad_clip = 0) {
  try {
    train(plan, backend_with(fault), grad_clip);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(OffloadUnderCudaSemantics, EveryTierTrainsToThePlainCpuBackendsBits) {
  using T = OffloadTier;
  for (const Plan& plan : {offloaded(3, T::kCpu, T::kCpu, T::kCpu),
                           offloaded(3, T::kNvme, T::kNvme, T::kNvme),
                           offloaded(3, T::kNone, T::kNone, T::kCpu),
                           offloaded(2, T::kCpu, T::kCpu, T::kNone),
                           offloaded(1, T::kNvme, T::kNone, T::kNone)}) {
    SCOPED_TRACE(plan.label());
    const auto want = train(plan, engine::cpu_backend_maker());
    const auto got = train(plan, backend_with(Fault::kNone));
    EXPECT_EQ(got.losses, want.losses);
    EXPECT_EQ(got.grad_norms, want.grad_norms);
  }
}

TEST(OffloadUnderCudaSemantics, TheGathersCastUnorderedAsOnTheH200IsNamed) {
  using T = OffloadTier;
  for (const Plan& plan : {offloaded(3, T::kCpu, T::kCpu, T::kCpu),
                           offloaded(3, T::kNvme, T::kNvme, T::kNvme)}) {
    SCOPED_TRACE(plan.label());
    const std::string race = failure_of(plan, Fault::kCastUnordered);
    EXPECT_TRUE(has(race, "race on block 'offload:param_fetch'")) << race;
    EXPECT_TRUE(has(race, "to_compute on the compute stream")) << race;
  }
}

TEST(OffloadUnderCudaSemantics, TheHostWaitDroppedBeforeAddingAGradientShardIsNamed) {
  using T = OffloadTier;
  for (const Plan& plan : {offloaded(2, T::kCpu, T::kCpu, T::kNone),
                           offloaded(3, T::kCpu, T::kNvme, T::kCpu)}) {
    SCOPED_TRACE(plan.label());
    const std::string race = failure_of(plan, Fault::kNoHostWait);
    EXPECT_TRUE(has(race, "race on pinned host block 'offload:grad")) << race;
    EXPECT_TRUE(has(race, "copy_async on the copy stream")) << race;
  }
}

// Clipping on: the host steps of the all-host ZeRO-3 plan are host functions carried into the
// next step; the first steps' norms are above the clip (the clipping is what is tested), and
// the training is the plain CPU backend's (which steps them inline in the tail) bit for bit.
TEST(OffloadUnderCudaSemantics, CarriedHostFunctionsTrainToThePlainCpuBackendsBits) {
  using T = OffloadTier;
  const Plan plan = offloaded(3, T::kCpu, T::kCpu, T::kCpu);
  constexpr double kClip = 0.5;
  const auto want = train(plan, engine::cpu_backend_maker(), kClip);
  const auto got = train(plan, backend_with(Fault::kNone), kClip);
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_EQ(got.grad_norms, want.grad_norms);
  ASSERT_FALSE(want.grad_norms.empty());
  EXPECT_GT(want.grad_norms.front(), kClip);
}

TEST(OffloadUnderCudaSemantics, AFetchThatDoesNotWaitForItsUnitsCarriedUpdateIsNamed) {
  using T = OffloadTier;
  const std::string race = failure_of(offloaded(3, T::kCpu, T::kCpu, T::kCpu), Fault::kCarriedUnwaited, 0.5);
  EXPECT_TRUE(has(race, "race on pinned host block 'offload:params")) << race;
  EXPECT_TRUE(has(race, "host-function stream")) << race;
}

TEST(OffloadUnderCudaSemantics, HostWorkOnTheHostFunctionStreamThatCopiesIsNamed) {
  using T = OffloadTier;
  // ZeRO-2 with the optimizer and gradients on the host: each layer's host AdamW (in the
  // backward: nothing clips) copies the updated parameters up to the device.
  const std::string race = failure_of(offloaded(2, T::kCpu, T::kCpu, T::kNone), Fault::kDeviceWorkOnHostStream);
  EXPECT_TRUE(has(race, "made a CUDA call")) << race;
}

}  // namespace
}  // namespace strata::offload_cuda_semantics_test
