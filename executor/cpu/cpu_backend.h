// The CPU backend (executor/engine/backend.h): kernels/cpu in fp32 on host memory that the
// accounting allocator budgets as the device tier, MPI communicators, and one stream besides
// the calling thread: every call runs to completion in call order, so the engine's Program
// order is the execution order and a stream mark is -1, except the host work handed to
// run_on_host_stream, which a thread of its own runs (host_stream.h); its marks are its
// tickets, and a wait for one blocks the caller. Timestamps are the host's steady clock,
// taken on the host stream's thread for that stream.
// Deliberately not here: the model's math (cpu_layer_ops.h), MPI start-up (tools/).
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "executor/comm/communicator_factory.h"
#include "executor/cpu/cpu_layer_ops.h"
#include "executor/cpu/host_stream.h"
#include "executor/engine/backend.h"

namespace strata::cpu_backend {

// Whether a rank's host thread gets a core of its own: the node's hardware threads shared by
// its ranks leave more than the rank's compute threads. Elsewhere the host thread would only
// time-slice with the compute, and a rank descheduled in its backward holds its peers
// spinning in their collectives: dp2 on 2 cores, a thread each, the backward ran ~1 ms a step
// slower with the host thread (~7% of the step, 2026-11-29); one rank of 2 threads on 2 cores
// hid none of its host work.
bool host_thread_has_a_core(int hardware_threads, int ranks_on_node, int compute_threads);

class CpuBackend : public engine::Backend {
 public:
  // alloc and comms must outlive the backend: MPI splits of a world of processes, or
  // LocalCommunicators among the threads of one process (strata select).
  CpuBackend(AccountingAllocator& alloc, CommunicatorFactory& comms)
      : alloc_(&alloc), comms_(&comms), ops_(alloc) {}

  std::string_view name() const override { return "cpu"; }
  strata::Backend kind() const override { return strata::Backend::kCpu; }
  AccountingAllocator& accounting() override { return *alloc_; }

  engine::Tensor allocate(MemoryTier tier, DType dtype, std::int64_t n, const std::string& tag,
                          bool zeroed = true) override;
  void release_after(engine::Tensor t, Stream) override { t.reset(); }
  model::LayerOps& layer_ops() override { return ops_; }
  CommunicatorFactory& communicators() override { return *comms_; }

  void zero(void* data, DType dtype, std::int64_t n, Stream) override;
  void fill(float* data, float value, std::int64_t n) override;
  double sum_of_squares(const float* data, std::int64_t n) override;
  void adamw(const std::vector<engine::AdamWSpan>& tensors, const engine::AdamWStep& hp,
             float grad_scale) override;
  void to_compute(void* dst, const float* src, std::int64_t n, Stream stream = Stream::kCompute) override;
  // Draws on the OpenMP team straight into dst (model::init_unit_range): the parameters'
  // values without a host buffer and a copy of them. Always true.
  bool init_seeded(float* dst, const UnitLayout& unit, std::uint64_t seed, std::int64_t begin,
                   std::int64_t end) override;
  void copy(void* dst, const void* src, std::int64_t bytes, Stream) override;
  // Everything runs on the call: an async copy is a copy, and there is nothing to wait for.
  void copy_async(void* dst, const void* src, std::int64_t bytes, Stream stream) override {
    copy(dst, src, bytes, stream);
  }
  void host_wait_for(int mark) override { host_.wait_for(mark); }

  void run_on_host_stream(const std::string&, std::vector<engine::HostTouch>,
                          std::function<void()> work) override {
    host_.submit(std::move(work));
  }
  // Where the rank has a core its compute threads leave free (host_thread_has_a_core).
  bool host_stream_apart() const override;

  int record(Stream stream) override { return stream == Stream::kHost ? host_.last_ticket() : -1; }
  // Work on the calling thread is done when issued; the host stream keeps its own order.
  void wait(Stream waiter, int mark) override {
    if (waiter != Stream::kHost) host_.wait_for(mark);
  }
  void wait(Communicator&, int mark) override { host_.wait_for(mark); }
  void synchronize() override { host_.drain(); }
  void host_wait(Stream stream) override {
    if (stream == Stream::kHost) host_.drain();
  }

  int timestamp(Stream stream) override;
  double seconds_between(int origin, int mark) override;
  void clear_timestamps() override;

 private:
  AccountingAllocator* alloc_;
  CommunicatorFactory* comms_;
  CpuLayerOps ops_;
  mutable std::mutex stamps_mutex_;  // the host stream's thread writes its stamps
  std::deque<std::chrono::steady_clock::time_point> stamps_;
  int last_stamp_ticket_ = 0;  // the host stream's last stamp (clear_timestamps waits for it)
  HostStream host_;  // last: its thread ends before the members its work may touch
};

// The CPU backend's maker (backend.h): its groups are the host groups it is given.
engine::BackendMaker cpu_backend_maker();

}  // namespace strata::cpu_backend
