// PoolRecorder: the CUDA backend without a GPU, for checking the memory model against what
// the CUDA backend asks its device pool for, on any machine. It is an engine::Backend whose
// device allocations are the CUDA backend's pool requests -- the same bytes, tags and order,
// because they come from the same code: the model's ops through CudaShapedLayerOps
// (cuda_op_allocations.h, which the real CudaLayerOps derives from too), the engine's and the
// model state's through pool_request_bytes, as CudaBackend::allocate -- accounted in an
// AccountingAllocator's device tier exactly as the DevicePool accounts them (reserve(), the
// requested bytes). Nothing is behind them: device tensors point into one inaccessible page
// (a host read or write of device memory faults, as it would on a GPU), kernels, copies and
// collectives do nothing, and the rank's process groups are communicators that carry
// nothing. So one rank of any t x p x d plan replays its Program alone, in one thread, with
// no arithmetic, and the allocator's peak is the pool's accounted peak on a GPU.
// Host-tier memory (offload) is real host memory, as the CUDA backend's pinned buffers are.
// Deliberately not here: the pool's size classes (DevicePool::class_of: its reserved bytes),
// memory outside the pool (the cuBLASLt workspace, the CUDA context, NCCL's buffers), NVMe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cost_model/specs/partition.h"
#include "executor/comm/communicator_factory.h"
#include "executor/cuda/cuda_op_allocations.h"
#include "executor/engine/backend.h"

namespace strata::cuda {

// One rank's groups of a t x p x d world in which no message moves: split() gives each group
// this rank's rank and size in it (process_groups.h's member lists), every collective and
// message is a no-op. For replaying a rank's Program alone.
class SilentCommunicatorFactory final : public CommunicatorFactory {
 public:
  SilentCommunicatorFactory(const ParallelDims& dims, int world_rank);
  int world_rank() const override { return world_rank_; }
  int world_size() const override { return dims_.world_size(); }
  std::unique_ptr<Communicator> split(GroupKind kind, int color, int key) override;

 private:
  ParallelDims dims_;
  int world_rank_;
};

// Whether the recorder runs the kernels' shape checks (attention's head sizes: what a GPU run
// refuses at a launch): on for a check that a GPU run could start; off to replay, for their
// memory alone, shapes no kernel is built for (the memory model's tests of tiny models).
enum class KernelShapeChecks { kOn, kOff };

class PoolRecorder final : public engine::Backend {
 public:
  // alloc must outlive the recorder. Throws SystemError when the inaccessible page cannot be
  // mapped.
  PoolRecorder(AccountingAllocator& alloc, const ParallelDims& dims, int world_rank,
               KernelShapeChecks checks = KernelShapeChecks::kOn);
  ~PoolRecorder() override;
  PoolRecorder(const PoolRecorder&) = delete;
  PoolRecorder& operator=(const PoolRecorder&) = delete;

  std::string_view name() const override { return "cuda"; }
  strata::Backend kind() const override { return strata::Backend::kCuda; }
  AccountingAllocator& accounting() override { return *alloc_; }

  engine::Tensor allocate(MemoryTier tier, DType dtype, std::int64_t n, const std::string& tag,
                          bool zeroed = true) override;
  // The CUDA backend frees at once too (after ordering the compute stream behind `stream`).
  void release_after(engine::Tensor t, Stream) override { t.reset(); }
  model::LayerOps& layer_ops() override;
  CommunicatorFactory& communicators() override { return comms_; }

  void zero(void*, DType, std::int64_t, Stream) override {}
  void fill(float*, float, std::int64_t) override {}
  double sum_of_squares(const float*, std::int64_t) override { return 0; }
  void adamw(const std::vector<engine::AdamWSpan>&, const engine::AdamWStep&, float) override {}
  void adamw_from_device(const std::vector<engine::AdamWSpan>&, const engine::AdamWStep&,
                         const engine::DeviceStepScalars*) override {}
  void sum_squares_on_device(const std::vector<std::vector<engine::FloatSpan>>&,
                             double*) override {}
  void clip_factor_on_device(float, engine::DeviceStepScalars*) override {}
  void to_compute(void*, const float*, std::int64_t, Stream) override {}
  void copy(void*, const void*, std::int64_t, Stream) override {}
  void copy_async(void*, const void*, std::int64_t, Stream) override {}
  void host_wait_for(int) override {}

  int record(Stream) override { return -1; }
  void wait(Stream, int) override {}
  void wait(Communicator&, int) override {}
  void synchronize() override {}
  void host_wait(Stream) override {}
  int timestamp(Stream) override { return 0; }
  double seconds_between(int, int) override { return 0; }
  void clear_timestamps() override {}

  // The device tensor of `bytes` requested under `tag` (accounted; 0 bytes: an empty tensor,
  // as the pool's empty block).
  engine::Tensor device_block(std::int64_t bytes, DType dtype, const std::string& tag);

 private:
  class Ops;
  AccountingAllocator* alloc_;
  SilentCommunicatorFactory comms_;
  KernelShapeChecks checks_;
  void* no_access_page_ = nullptr;  // every device tensor's address
  std::unique_ptr<Ops> ops_;
};

}  // namespace strata::cuda
