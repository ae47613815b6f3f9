// HostStagedCommunicator: the Communicator on DEVICE buffers that routes every operation
// through a host Communicator (an MpiCommunicator in practice): copy the device data into a
// pinned host staging buffer on its stream, wait, run the host operation, copy the result
// back and wait again. It is what lets several ranks share ONE GPU, which NCCL refuses (two
// ranks of an NCCL group may not sit on one device), and it is the reference for NCCL: the
// sums are the host communicator's, so they are bit-identical to the CPU backend's by
// construction (communicator.h's determinism contract holds because the host's does).
//
// Semantics: buffers are device pointers on the current device; the copies are enqueued on
// the stream given at construction, so work the caller enqueued there before the call is
// seen. Collectives and recv() return with the result in device memory and the stream
// drained (there is nothing left to synchronize() for). send() copies the data out before it
// returns, so the device buffer may be reused at once; the host send completes with its
// Request. irecv()'s Request copies the message to the device when it is waited for. Dtypes,
// counts, peers and roots are the host communicator's rules; a bad dtype or a negative count
// throws std::invalid_argument before anything is copied or sent.
//
// Staging: page-locked host blocks (cudaHostAlloc), kept in a small pool and reused: an
// operation takes the smallest free block that fits and gives it back when done; a block
// that is too small is freed when a larger one is made, so the pool holds about one block
// per concurrently pending send, sized to the largest message. Like NCCL's internal buffers
// (and MpiCommunicator's scratch) they are outside the AccountingAllocator, which is why this
// does not use PinnedHostBuffer (that one charges the host tier of an allocator the
// communicator does not have). One thread drives a communicator.
// Deliberately not here: overlapping the copies with the host transfer (chunked
// pipelining), MPI (the host communicator is abstract; no MPI header here).
#pragma once

#include <cstdint>
#include <memory>

#include <cuda_runtime.h>

#include "executor/comm/communicator.h"

namespace strata::cuda {

class StagingPool;  // host_staged_communicator.cc

class HostStagedCommunicator final : public Communicator {
 public:
  // host: the group's communicator on host buffers (owned). stream: where the copies run.
  HostStagedCommunicator(std::unique_ptr<Communicator> host, cudaStream_t stream);
  HostStagedCommunicator(const HostStagedCommunicator&) = delete;
  HostStagedCommunicator& operator=(const HostStagedCommunicator&) = delete;
  ~HostStagedCommunicator() override;

  Communicator& host() const { return *host_; }
  cudaStream_t stream() const { return stream_; }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }

  STRATA_COMMUNICATOR_TRANSPORT
  // This rank's stream has drained, then every rank has reached the host barrier.
  void barrier() override;
  void synchronize() override;

 private:
  std::unique_ptr<Communicator> host_;
  cudaStream_t stream_;
  // Shared with pending send/irecv Requests, which give their blocks back when they complete
  // (even after the communicator is gone).
  std::shared_ptr<StagingPool> pool_;
};

}  // namespace strata::cuda
