// The CUDA backend's pool requests without a GPU (see pool_recorder.h).
#include "executor/cuda/pool_recorder.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "executor/comm/process_groups.h"
#include "executor/cpu/cpu_layer_ops.h"
#include "cost_model/specs/errors.h"
#include "kernels/cuda/attention_shapes.h"

namespace strata::cuda {
namespace {

class SilentCommunicator final : public Communicator {
 public:
  SilentCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void do_all_reduce_sum(void*, std::int64_t, DType) override {}
  void do_all_reduce_max(void*, std::int64_t, DType) override {}
  void do_reduce_scatter_sum(const void*, void*, std::int64_t, DType) override {}
  void do_all_gather(const void*, void*, std::int64_t, DType) override {}
  void do_broadcast(void*, std::int64_t, DType, int) override {}
  Request do_send(const void*, std::int64_t, DType, int, int) override { return Request{}; }
  void do_recv(void*, std::int64_t, DType, int, int) override {}
  Request do_irecv(void*, std::int64_t, DType, int, int) override { return Request{}; }
  void barrier() override {}

 private:
  int rank_, size_;
};

// Holds the accounting of a device block; the memory is the no-access page.
class ReservationStorage final : public engine::Tensor::Storage {
 public:
  explicit ReservationStorage(Reservation r) : reservation(std::move(r)) {}
  Reservation reservation;
};

}  // namespace

SilentCommunicatorFactory::SilentCommunicatorFactory(const ParallelDims& dims, int world_rank)
    : dims_(dims), world_rank_(world_rank) {
  (void)rank_coords(world_rank, dims);  // checks the rank and the degrees
}

std::unique_ptr<Communicator> SilentCommunicatorFactory::split(GroupKind kind, int color, int) {
  if (color == kNoGroup) return nullptr;
  // A pipeline link is a two-rank group: its sender is rank 0, its receiver rank 1.
  if (kind == GroupKind::kPpSend) return std::make_unique<SilentCommunicator>(0, 2);
  if (kind == GroupKind::kPpRecv) return std::make_unique<SilentCommunicator>(1, 2);
  std::vector<int> members;
  switch (kind) {
    case GroupKind::kWorld:
      for (int r = 0; r < dims_.world_size(); ++r) members.push_back(r);
      break;
    case GroupKind::kTp: members = tp_group_ranks(world_rank_, dims_); break;
    case GroupKind::kKvCopies: members = kv_copies_group_ranks(world_rank_, dims_); break;
    case GroupKind::kDp: members = dp_group_ranks(world_rank_, dims_); break;
    case GroupKind::kPp: members = pp_group_ranks(world_rank_, dims_); break;
    case GroupKind::kModel: members = model_group_ranks(world_rank_, dims_); break;
    case GroupKind::kEmbedding: members = embedding_group_ranks(world_rank_, dims_); break;
    case GroupKind::kPpSend:
    case GroupKind::kPpRecv: break;
  }
  const auto it = std::find(members.begin(), members.end(), world_rank_);
  if (it == members.end()) {
    throw std::logic_error(fmt::format("silent communicators: rank {} is not in its group",
                                       world_rank_));
  }
  return std::make_unique<SilentCommunicator>(static_cast<int>(it - members.begin()),
                                              static_cast<int>(members.size()));
}

namespace {
// Every kernel of layer_kernels.def a no-op: CudaShapedLayerOps' allocations alone.
class NoKernels : public CudaShapedLayerOps {
 public:
#define STRATA_LAYER_KERNEL(name, uses, params, args, flops, ...) void name params override {}
#define STRATA_LAYER_KERNEL_WITH_SCRATCH(name, uses, params, args, flops, ...)
#include "executor/model/layer_kernels.def"

 protected:
#define STRATA_LAYER_KERNEL(name, uses, params, args, flops, ...)
#define STRATA_LAYER_KERNEL_WITH_SCRATCH(name, uses, params, args, flops, ...) \
  void name##_with STRATA_WITH_SCRATCH params override {}
#include "executor/model/layer_kernels.def"
  void cross_entropy_with(float*, engine::Tensor&, const float*, const std::int32_t*, int, int,
                          int, int, model::TpContext&, float*) override {}
};
}  // namespace

// The model's ops on the recorder: its pool, and the attention kernels' shape checks (a GPU
// run would refuse these shapes at the launch).
class PoolRecorder::Ops final : public NoKernels {
 public:
  explicit Ops(PoolRecorder& owner) : owner_(&owner) {}
  void attention_forward(void*, float*, const void*, int B, int T, int C, int NH,
                         int KVH) override {
    if (owner_->checks_ == KernelShapeChecks::kOn) {
      kernels::cuda::check_attention_shapes("attention_forward", B, T, C, NH, KVH);
    }
  }

 protected:
  engine::Tensor block(std::int64_t bytes, DType dtype, const std::string& tag) override {
    return owner_->device_block(bytes, dtype, tag);
  }
  void attention_backward_with(void*, const void*, const void*, const void*, const float*,
                               int B, int T, int C, int NH, int KVH, float*) override {
    if (owner_->checks_ == KernelShapeChecks::kOn) {
      kernels::cuda::check_attention_shapes("attention_backward", B, T, C, NH, KVH);
    }
  }

 private:
  PoolRecorder* owner_;
};

PoolRecorder::PoolRecorder(AccountingAllocator& alloc, const ParallelDims& dims, int world_rank,
                           KernelShapeChecks checks)
    : alloc_(&alloc), comms_(dims, world_rank), checks_(checks) {
  void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    throw SystemError(fmt::format("pool recorder: mmap of a no-access page failed: {}",
                                  std::strerror(errno)));
  }
  no_access_page_ = page;
  ops_ = std::make_unique<Ops>(*this);
}

PoolRecorder::~PoolRecorder() { munmap(no_access_page_, 4096); }

model::LayerOps& PoolRecorder::layer_ops() { return *ops_; }

engine::Tensor PoolRecorder::device_block(std::int64_t bytes, DType dtype, const std::string& tag) {
  Reservation reservation = alloc_->reserve(MemoryTier::kDevice, bytes, tag);
  void* data = bytes == 0 ? nullptr : no_access_page_;
  return engine::Tensor(data, bytes / dtype_bytes(dtype), dtype, MemoryTier::kDevice,
                        std::make_unique<ReservationStorage>(std::move(reservation)));
}

engine::Tensor PoolRecorder::allocate(MemoryTier tier, DType dtype, std::int64_t n,
                                      const std::string& tag, bool zeroed) {
  if (tier == MemoryTier::kDevice) return device_block(pool_request_bytes(dtype, n), dtype, tag);
  if (tier != MemoryTier::kHost) {
    throw std::invalid_argument("pool recorder: the nvme tier holds no memory (use the NvmeStore)");
  }
  return cpu_backend::tensor_of(
      alloc_->allocate(tier, pool_request_bytes(dtype, n), tag,
                       zeroed ? Fill::kZero : Fill::kUninitialized),
      dtype, tier);
}

}  // namespace strata::cuda
