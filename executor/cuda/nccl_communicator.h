// NcclCommunicator: the Communicator (executor/comm/communicator.h) over NCCL, for the CUDA
// backend. Buffers are DEVICE pointers on the current device; every operation is enqueued on
// the stream given at construction (the rank's communication stream, RankStreams::comm) and
// returns without waiting, except recv(), barrier() and synchronize(), which wait for it.
//
// Bootstrap: create() is collective over a HOST group (any Communicator on host buffers; an
// MpiCommunicator in practice): rank 0 calls ncclGetUniqueId and broadcasts it through the
// group as kI32 words (with an ok flag, so a failure on rank 0 fails every rank instead of
// hanging them); each rank then calls ncclCommInitRank on its current device (cudaSetDevice
// is the caller's, one device per rank: NCCL rejects two ranks of a group on one GPU; ranks
// sharing a GPU use HostStagedCommunicator). No MPI header is needed here. create_single()
// makes a 1-rank group with ncclCommInitAll and needs no host group at all.
//
// Dtypes and determinism (the interface's contract): every DType moves with its NCCL type
// (bf16 as ncclBfloat16). Floating-point sums (kF32, kF64, kBF16) never use ncclAllReduce /
// ncclReduceScatter, whose ring and tree orders are not the rank order. As in MpiCommunicator,
// only bytes move through NCCL (grouped ncclSend/ncclRecv, then ncclAllGather or grouped
// point-to-point to spread the owners' blocks back; collective_layout.h) and rank r adds its
// block's s copies in rank order with rank_ordered_sum (bf16 in fp32, rounded once), so
// results are bit-identical to the MPI backend's per element and across ranks and reruns.
// Traffic per rank: (s-1)/s of the data in each of the two phases, the same as a ring
// all-reduce. Scratch of n elements (s*n for reduce_scatter_sum) is cudaMallocAsync'd on the
// stream for the call, outside the AccountingAllocator, like NCCL's own internal buffers (and
// MpiCommunicator's scratch). Max and int64 sums are exact in any order and use
// ncclAllReduce / ncclReduceScatter.
//
// Point-to-point: NCCL has no tags; `tag` is accepted for the interface and not matched.
// Messages between one pair arrive in the order they were posted (NCCL orders operations on a
// communicator), which is what the interface promises. NCCL send/recv rendezvous: a large
// send completes only when the peer's recv runs, so two ranks that each send() to the other
// before recv() deadlock; exchanges in both directions go through send_recv() (one NCCL group).
//
// Errors: every NCCL/CUDA call is checked; failures throw SystemError naming the call, file,
// line and the library's text; a bad dtype, count, peer or root throws std::invalid_argument
// before anything is enqueued. One thread drives a communicator.
// Deliberately not here: communicator splitting (ncclCommSplit), non-blocking init, abort.
#pragma once

#include <cstdint>
#include <memory>

#include <cuda_runtime.h>
#include <nccl.h>

#include "executor/comm/communicator.h"
#include "kernels/cuda/cuda_resources.h"

namespace strata::cuda {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over every rank of `group`, a communicator on HOST buffers (used only for the
  // bootstrap broadcast; the NCCL group has its size and ranks). Throws SystemError.
  static std::unique_ptr<NcclCommunicator> create(Communicator& group, cudaStream_t stream);
  // A 1-rank group on the current device; no MPI. Throws SystemError.
  static std::unique_ptr<NcclCommunicator> create_single(cudaStream_t stream);

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  ~NcclCommunicator() override;  // ncclCommFinalize + ncclCommDestroy (abort on failure)

  ncclComm_t handle() const { return comm_; }
  cudaStream_t stream() const { return stream_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // send/irecv: the Request completes when the stream has run the operation (an event).
  STRATA_COMMUNICATOR_TRANSPORT
  // Sends send_data (n) to peer and receives n elements from it into recv_data, as one NCCL
  // group (no rendezvous deadlock). Enqueued; wait with synchronize().
  void send_recv(const void* send_data, void* recv_data, std::int64_t n, DType dtype, int peer);
  template <MovableElement T>
  void send_recv(const T* send_data, T* recv_data, std::int64_t n, int peer) {
    send_recv(send_data, recv_data, n, detail::pointer_dtype<T>(), peer);
  }
  // Every rank has reached the barrier and this rank's stream has drained.
  void barrier() override;
  // Waits for everything enqueued on the stream, then checks NCCL's asynchronous error.
  void synchronize() override;

 private:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream);
  void deterministic_all_reduce_sum(void* data, std::int64_t n, DType dtype);
  Request event_request();

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
  kernels::cuda::DeviceBuffer barrier_word_;  // 8 bytes for barrier(), outside the accounting
};

}  // namespace strata::cuda
