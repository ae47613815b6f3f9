// RankStreams: the three CUDA streams one rank runs on, and the events that order them.
//   compute: kernels (forward, backward, optimizer);
//   comm:    NCCL collectives and point-to-point (NcclCommunicator is bound to it);
//   copy:    host<->device copies (offload of optimizer states, pinned staging).
// Each is a non-blocking stream (no implicit sync with the legacy stream), so the only
// ordering between them is what the caller states with order(): "work enqueued on `waiter`
// from now on starts after everything enqueued on `producer` so far", via an event recorded
// on producer and cudaStreamWaitEvent on waiter (no host synchronisation).
// Deliberately not here: priorities, graphs, device selection (cudaSetDevice is the rank
// setup's), and any policy about which stream a given op uses.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_resources.h"

namespace strata::cuda {

// A cross-stream dependency: record() on the producer, then make waiters wait on it. Timing
// disabled (cudaEventDisableTiming is the cheap kind for ordering). Move-only RAII.
class StreamEvent {
 public:
  static StreamEvent create();  // throws SystemError
  void record(cudaStream_t producer) const;     // throws SystemError
  void wait_on(cudaStream_t waiter) const;      // throws SystemError
  void synchronize() const;                     // host waits; throws SystemError
  cudaEvent_t get() const { return event_.get(); }

 private:
  kernels::cuda::Event event_;
};

class RankStreams {
 public:
  // Creates the three streams on the current device. Throws SystemError.
  static RankStreams create();

  cudaStream_t compute() const { return compute_.get(); }
  cudaStream_t comm() const { return comm_.get(); }
  cudaStream_t copy() const { return copy_.get(); }

  // waiter's later work runs after producer's work so far; `event` is recorded on producer.
  // The event may be reused for the next order() once this call returns (CUDA captures the
  // recorded state at cudaStreamWaitEvent time).
  static void order(cudaStream_t waiter, cudaStream_t producer, const StreamEvent& event);

  // Host waits for all three streams; surfaces asynchronous faults as SystemError.
  void synchronize_all() const;

 private:
  kernels::cuda::Stream compute_;
  kernels::cuda::Stream comm_;
  kernels::cuda::Stream copy_;
};

}  // namespace strata::cuda
