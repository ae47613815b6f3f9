// The CPU backend with CUDA's semantics (`strata run --backend cpu --cuda-semantics`, and the
// equivalence matrix's second pass in CI): the same engine, Program and CPU kernels, but every
// primitive behaves as the CUDA backend's does (cuda_backend.cc), so that an ordering bug of
// the engine shows up on a machine without a GPU:
// - kernels, copies and fills are queued on the stream the CUDA backend would use and run
//   only when something waits for that stream (stream_scheduler.h: the latest order CUDA
//   allows); copies touching host memory, fills and norms make the host wait, as they do
//   there;
// - device memory comes from a stream-ordered pool that hands a freed block out again at once
//   to any request of its size class (the last freed of that class first; the CUDA pool's
//   classes, pool_size_class.h) and fills it with NaN in compute-stream order, as the CUDA
//   pool's reuse does;
// - the model state keeps the CUDA backend's buffers: a compute copy of the parameters apart
//   from their fp32 master, every cast between them a to_compute op on the compute stream
//   (an fp32 copy here), so that the bf16 paths' ordering runs too;
// - host-tier memory is pinned, as the CUDA backend's: a copy_async touching it runs on its
//   stream while the host goes on, and host work declared through on_host (the CPU optimizer,
//   gradient accumulation, NVMe reads and writes, the free of a pinned buffer) that touches it
//   before the host has waited for the copy is a race; copy_async from pageable memory stages
//   the source on the call, into pageable memory it waits, as cudaMemcpyAsync does;
// - communicators are on the CUDA backend's streams (group_streams.h) and run at once, as DMA
//   writes what it receives;
// - a happens-before checker (race_checker.h) reports any op touching a block from another
//   stream with no ordering edge, naming the op, the block and both streams (StreamRace).
// - captured steps (CUDA graphs, `--cuda-graphs`): the scheduler records a step's work and
//   replays the same closures (stream_scheduler.h); the pool keeps its blocks while a graph
//   holds their addresses, and the step's scalars are read from "device" memory when the
//   kernels run, as the CUDA kernels read them.
// The arithmetic is the CPU backend's (fp32), so a plan's losses equal the plain CPU
// backend's bit for bit when the engine orders everything it must.
// Not the same as the plain CPU backend: memory accounting counts the pool's cached blocks
// until the next synchronize (peaks are not the memory model's), and timings include the
// queueing.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "executor/comm/communicator_factory.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/cpu/cuda_semantics/deferred_layer_ops.h"
#include "executor/cpu/cuda_semantics/stream_scheduler.h"
#include "executor/cpu/cuda_semantics/streamed_communicator.h"
#include "executor/engine/backend.h"

namespace strata::cuda_semantics {

class CudaSemanticsBackend : public engine::Backend {
 public:
  // alloc and host (MPI groups of the rank's world) must outlive the backend.
  // capture_steps: steps are captured once and replayed where the plan allows (engine.h).
  CudaSemanticsBackend(AccountingAllocator& alloc, CommunicatorFactory& host,
                       bool capture_steps = false);
  ~CudaSemanticsBackend() override;

  std::string_view name() const override { return "cpu"; }
  strata::Backend kind() const override { return strata::Backend::kCpu; }
  // The CUDA backend's buffers and casts: a compute copy apart from the fp32 master, written
  // by to_compute (here an fp32 copy, so the losses stay the plain CPU backend's bits).
  bool separate_compute_copy() const override { return true; }
  AccountingAllocator& accounting() override { return *alloc_; }

  engine::Tensor allocate(MemoryTier tier, DType dtype, std::int64_t n, const std::string& tag,
                          bool zeroed = true) override;
  void release_after(engine::Tensor t, Stream stream) override;
  model::LayerOps& layer_ops() override { return ops_; }
  CommunicatorFactory& communicators() override { return comms_; }

  void zero(void* data, DType dtype, std::int64_t n, Stream stream) override;
  void fill(float* data, float value, std::int64_t n) override;
  double sum_of_squares(const float* data, std::int64_t n) override;
  void adamw(const std::vector<engine::AdamWSpan>& tensors, const engine::AdamWStep& hp,
             float grad_scale) override;
  void adamw_from_device(const std::vector<engine::AdamWSpan>& tensors, const engine::AdamWStep& hp,
                         const engine::DeviceStepScalars* scalars) override;
  void sum_squares_on_device(const std::vector<std::vector<engine::FloatSpan>>& groups,
                             double* sum) override;
  void clip_factor_on_device(float max_norm, engine::DeviceStepScalars* scalars) override;
  void to_compute(void* dst, const float* src, std::int64_t n, Stream stream = Stream::kCompute) override;
  void copy(void* dst, const void* src, std::int64_t bytes, Stream stream) override;
  void copy_async(void* dst, const void* src, std::int64_t bytes, Stream stream) override;
  void on_host(const std::string& op, std::initializer_list<engine::HostTouch> touches,
               const std::function<void()>& work) override;
  // The CUDA backend's host-function stream: queued host work, run when something waits for
  // it, which may touch host memory alone (stream_scheduler.h names any CUDA call it makes).
  void run_on_host_stream(const std::string& op, std::vector<engine::HostTouch> touches,
                          std::function<void()> work) override;
  bool host_stream_apart() const override { return true; }
  bool host_stream_host_memory_only() const override { return true; }

  int record(Stream stream) override;
  void wait(Stream waiter, int mark) override;
  void wait(Communicator& comm, int mark) override;
  void synchronize() override;
  void host_wait(Stream stream) override;
  void host_wait_for(int mark) override;

  int timestamp(Stream stream) override;
  double seconds_between(int origin, int mark) override;
  void clear_timestamps() override;

  bool captures_steps() const override { return capture_steps_; }
  bool collectives_on_device() const override { return true; }  // NCCL's, modelled
  void begin_capture() override;
  void end_capture() override;
  void launch_graph() override;
  void drop_graph() override;
  std::vector<FreeBlock> free_blocks() const override;

  StreamScheduler& scheduler() { return scheduler_; }
  // Marks of the host stream (Stream::kHost) are numbered from here on.
  static constexpr int kHostMarkBase = 1 << 30;

  // Device memory in compute-stream order (the pool): `bytes` uninitialised (NaN when never
  // used), tagged. Used by allocate() and the layer ops.
  engine::Tensor device_block(DType dtype, std::int64_t n, const std::string& tag);
  // Takes over a device tensor made elsewhere (a kernel's output), so that its free is
  // stream-ordered too.
  engine::Tensor adopt(engine::Tensor t, const std::string& tag);

 private:
  class PoolStorage;
  friend class PoolStorage;
  class PinnedStorage;
  friend class PinnedStorage;
  // A pinned host block's owner let go of it: a host write of all of it (its allocator may
  // hand it out again at once), then it leaves the checker.
  void free_pinned(engine::Tensor t, const std::string& tag) noexcept;
  // A block's last owner let go of it (on the host): NaN over it in compute order, then the
  // pool may hand it out again at once.
  void free_block(Buffer buffer, const std::string& tag) noexcept;
  void free_adopted(engine::Tensor t, const std::string& tag) noexcept;
  // Everything has run: the cached blocks go back to the allocator.
  void release_cache();

  AccountingAllocator* alloc_;
  bool capture_steps_ = false;
  StreamScheduler scheduler_;
  StreamedCommunicatorFactory comms_;
  cpu_backend::CpuBackend cpu_;  // the arithmetic
  DeferredLayerOps ops_;
  std::map<std::int64_t, std::vector<Buffer>> cache_;  // freed blocks by class, last freed last
  std::vector<engine::Tensor> adopted_freed_;          // until everything has run
  // Marks: the step's (cleared with its timestamps), and the host-function stream's, which
  // a step's carried host work (engine.h) is waited for by in the next: a ring, numbered
  // from kHostMarkBase on.
  const StreamScheduler::Mark& mark_at(int mark) const;
  static constexpr int kHostMarks = 4096;
  std::vector<StreamScheduler::Mark> marks_;
  std::vector<StreamScheduler::Mark> host_marks_;
  int next_host_mark_ = 0;
};

// The BackendMaker of `strata run --cuda-semantics` and the matrix's CUDA-semantics pass.
// capture_steps: `strata run --cuda-graphs` (CudaSemanticsBackend's).
engine::BackendMaker cuda_semantics_backend_maker(bool capture_steps = false);

}  // namespace strata::cuda_semantics
