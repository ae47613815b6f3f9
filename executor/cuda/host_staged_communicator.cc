// HostStagedCommunicator (see host_staged_communicator.h): every operation is
//   device --cudaMemcpyAsync on stream_--> pinned block --sync--> host op --> pinned block
//   --cudaMemcpyAsync on stream_--> device --sync
// with the pinned blocks drawn from a StagingPool and given back by an RAII lease.
#include "executor/cuda/host_staged_communicator.h"

#include <fmt/format.h>

#include <cstddef>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cost_model/specs/errors.h"
#include "executor/cuda/system_error.h"
#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {

namespace {

constexpr const char* kWho = "HostStagedCommunicator";

// Page-locked host memory; move-only, cudaFreeHost on destruction.
class PinnedBlock {
 public:
  PinnedBlock() = default;
  static PinnedBlock allocate(std::size_t bytes) {
    PinnedBlock block;
    as_system_error([&] { CUDA_CHECK(cudaHostAlloc(&block.data_, bytes, cudaHostAllocDefault)); });
    block.bytes_ = bytes;
    return block;
  }
  PinnedBlock(PinnedBlock&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  PinnedBlock& operator=(PinnedBlock&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  PinnedBlock(const PinnedBlock&) = delete;
  PinnedBlock& operator=(const PinnedBlock&) = delete;
  ~PinnedBlock() { release(); }

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() noexcept {
    if (data_ != nullptr) CUDA_CHECK_NOEXCEPT(cudaFreeHost(data_));
    data_ = nullptr;
    bytes_ = 0;
  }
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Blocks are made in powers of two from 64 KiB, so a run's few message sizes map onto a few
// blocks that are reused rather than re-pinned (cudaHostAlloc costs far more than a copy).
std::size_t block_bytes_for(std::size_t bytes) {
  std::size_t b = std::size_t{64} << 10;
  while (b < bytes) b *= 2;
  return b;
}

std::size_t checked_bytes(std::int64_t n, DType dtype, const char* op) {
  if (n < 0) {
    throw std::invalid_argument(fmt::format("{}::{}: element count {} is negative", kWho, op, n));
  }
  return static_cast<std::size_t>(n) * static_cast<std::size_t>(dtype_bytes(dtype));
}

}  // namespace

class StagingPool {
 public:
  // The smallest free block of at least `bytes`; else a new one, freeing the largest free
  // block first (it is too small, and would otherwise never be used again).
  PinnedBlock take(std::size_t bytes) {
    auto best = free_.end();
    auto largest = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->bytes() >= bytes && (best == free_.end() || it->bytes() < best->bytes())) best = it;
      if (largest == free_.end() || it->bytes() > largest->bytes()) largest = it;
    }
    if (best != free_.end()) {
      PinnedBlock block = std::move(*best);
      free_.erase(best);
      return block;
    }
    if (largest != free_.end()) free_.erase(largest);
    return PinnedBlock::allocate(block_bytes_for(bytes));
  }
  void give(PinnedBlock block) noexcept {
    try {
      free_.push_back(std::move(block));
    } catch (...) {
      // No room to keep it: `block` is freed when this returns.
    }
  }

 private:
  std::vector<PinnedBlock> free_;
};

namespace {

// A block on loan from the pool, given back when the lease ends (also on an exception).
class Lease {
 public:
  Lease(std::shared_ptr<StagingPool> pool, std::size_t bytes)
      : pool_(std::move(pool)), block_(pool_->take(bytes)) {}
  Lease(Lease&&) noexcept = default;
  Lease& operator=(Lease&&) = delete;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() {
    if (pool_) pool_->give(std::move(block_));
  }
  void* data() const { return block_.data(); }

 private:
  std::shared_ptr<StagingPool> pool_;
  PinnedBlock block_;
};

void to_host(void* host, const void* device, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  as_system_error([&] {
    CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  });
}

void to_device(void* device, const void* host, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  as_system_error([&] {
    CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream));
    // The block goes back to the pool next, and the caller may read the result at once.
    CUDA_CHECK(cudaStreamSynchronize(stream));
  });
}

// A host send from a staged copy: the block stays on loan until the send completes.
class StagedSend final : public Request::Impl {
 public:
  StagedSend(Lease lease, Request host) : lease_(std::move(lease)), host_(std::move(host)) {}
  void wait() override { host_.wait(); }
  void wait_noexcept() noexcept override { Request done = std::move(host_); }

 private:
  Lease lease_;  // destroyed after host_ (declared first): the send is done with it by then
  Request host_;
};

// A host receive into a block; completing it copies the message to the device.
class StagedRecv final : public Request::Impl {
 public:
  StagedRecv(Lease lease, Request host, void* device, std::size_t bytes, cudaStream_t stream)
      : lease_(std::move(lease)), host_(std::move(host)), device_(device), bytes_(bytes),
        stream_(stream) {}
  void wait() override {
    host_.wait();
    to_device(device_, lease_.data(), bytes_, stream_);
  }
  void wait_noexcept() noexcept override {
    { Request done = std::move(host_); }
    CUDA_CHECK_NOEXCEPT(
        cudaMemcpyAsync(device_, lease_.data(), bytes_, cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK_NOEXCEPT(cudaStreamSynchronize(stream_));
  }

 private:
  Lease lease_;
  Request host_;
  void* device_;
  std::size_t bytes_;
  cudaStream_t stream_;
};

// A one-rank group's result is its input: no round trip through the host, so that a step of
// one rank issues no host wait (a captured step may make none: engine.h).
void copy_on_stream(void* out, const void* in, std::size_t bytes, cudaStream_t stream) {
  if (out == in || bytes == 0) return;
  as_system_error([&] {
    CUDA_CHECK(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream));
  });
}

}  // namespace

HostStagedCommunicator::HostStagedCommunicator(std::unique_ptr<Communicator> host,
                                               cudaStream_t stream)
    : host_(std::move(host)), stream_(stream), pool_(std::make_shared<StagingPool>()) {
  if (!host_) throw std::invalid_argument("HostStagedCommunicator: no host communicator");
}

HostStagedCommunicator::~HostStagedCommunicator() = default;

void HostStagedCommunicator::do_all_reduce_sum(void* data, std::int64_t n, DType dtype) {
  require_reducible(dtype, kWho, "all_reduce_sum");
  const std::size_t bytes = checked_bytes(n, dtype, "all_reduce_sum");
  if (size() == 1) return;
  const Lease stage(pool_, bytes);
  to_host(stage.data(), data, bytes, stream_);
  host_->all_reduce_sum(stage.data(), n, dtype);
  to_device(data, stage.data(), bytes, stream_);
}

void HostStagedCommunicator::do_all_reduce_max(void* data, std::int64_t n, DType dtype) {
  require_reducible(dtype, kWho, "all_reduce_max");
  const std::size_t bytes = checked_bytes(n, dtype, "all_reduce_max");
  if (size() == 1) return;
  const Lease stage(pool_, bytes);
  to_host(stage.data(), data, bytes, stream_);
  host_->all_reduce_max(stage.data(), n, dtype);
  to_device(data, stage.data(), bytes, stream_);
}

void HostStagedCommunicator::do_reduce_scatter_sum(const void* in, void* out, std::int64_t n,
                                                DType dtype) {
  require_reducible(dtype, kWho, "reduce_scatter_sum");
  const std::size_t bytes = checked_bytes(n, dtype, "reduce_scatter_sum");
  if (size() == 1) return copy_on_stream(out, in, bytes, stream_);
  const std::size_t in_bytes = bytes * static_cast<std::size_t>(size());
  const Lease stage_in(pool_, in_bytes);
  const Lease stage_out(pool_, bytes);
  to_host(stage_in.data(), in, in_bytes, stream_);
  host_->reduce_scatter_sum(stage_in.data(), stage_out.data(), n, dtype);
  to_device(out, stage_out.data(), bytes, stream_);
}

void HostStagedCommunicator::do_all_gather(const void* in, void* out, std::int64_t n, DType dtype) {
  require_movable(dtype, kWho, "all_gather");
  const std::size_t bytes = checked_bytes(n, dtype, "all_gather");
  if (size() == 1) return copy_on_stream(out, in, bytes, stream_);
  const std::size_t out_bytes = bytes * static_cast<std::size_t>(size());
  const Lease stage_in(pool_, bytes);
  const Lease stage_out(pool_, out_bytes);
  to_host(stage_in.data(), in, bytes, stream_);
  host_->all_gather(stage_in.data(), stage_out.data(), n, dtype);
  to_device(out, stage_out.data(), out_bytes, stream_);
}

void HostStagedCommunicator::do_broadcast(void* data, std::int64_t n, DType dtype, int root) {
  require_movable(dtype, kWho, "broadcast");
  const std::size_t bytes = checked_bytes(n, dtype, "broadcast");
  if (size() == 1) return;
  const Lease stage(pool_, bytes);
  // Only the root's data matters; the others' is overwritten. (A bad root is the host's
  // error, raised on every rank alike.)
  if (root == rank()) to_host(stage.data(), data, bytes, stream_);
  host_->broadcast(stage.data(), n, dtype, root);
  to_device(data, stage.data(), bytes, stream_);
}

Request HostStagedCommunicator::do_send(const void* data, std::int64_t n, DType dtype, int peer,
                                     int tag) {
  require_movable(dtype, kWho, "send");
  const std::size_t bytes = checked_bytes(n, dtype, "send");
  Lease stage(pool_, bytes);
  to_host(stage.data(), data, bytes, stream_);
  Request host = host_->send(stage.data(), n, dtype, peer, tag);
  return Request(std::make_unique<StagedSend>(std::move(stage), std::move(host)));
}

void HostStagedCommunicator::do_recv(void* data, std::int64_t n, DType dtype, int peer, int tag) {
  irecv(data, n, dtype, peer, tag).wait();
}

Request HostStagedCommunicator::do_irecv(void* data, std::int64_t n, DType dtype, int peer,
                                      int tag) {
  require_movable(dtype, kWho, "irecv");
  const std::size_t bytes = checked_bytes(n, dtype, "irecv");
  Lease stage(pool_, bytes);
  Request host = host_->irecv(stage.data(), n, dtype, peer, tag);
  return Request(
      std::make_unique<StagedRecv>(std::move(stage), std::move(host), data, bytes, stream_));
}

void HostStagedCommunicator::barrier() {
  synchronize();
  host_->barrier();
}

void HostStagedCommunicator::synchronize() {
  as_system_error([&] { CUDA_CHECK(cudaStreamSynchronize(stream_)); });
}

}  // namespace strata::cuda
