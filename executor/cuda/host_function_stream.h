// HostFunctionStream: the CUDA backend's host stream (backend.h, run_on_host_stream): host
// work queued on a CUDA stream of its own with cudaLaunchHostFunc, so that it runs in stream
// order after the events its stream waits for (a gradient's copy down, the global norm) and
// device streams wait for it with events, while the thread that issues the GPU's work goes
// on. What the CPU backend's host thread (executor/cpu/host_stream.h) is there.
// - CUDA runs host functions on a thread of its own and lets them make no CUDA call: the
//   work given here must touch host memory only (the engine queues only such work:
//   Backend::host_stream_host_memory_only; the CUDA-semantics mode names any call).
// - An exception thrown by a piece of work is kept: the work queued after it is skipped (it
//   may depend on what failed), and rethrow_failure() throws it, once.
// Deliberately not here: events and marks (the backend's), what work may run here.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <mutex>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_resources.h"

namespace strata::cuda {

class HostFunctionStream {
 public:
  HostFunctionStream() = default;  // holds nothing; create() makes one
  static HostFunctionStream create();  // on the current device; throws CudaError

  cudaStream_t get() const { return stream_.get(); }
  // Queues `work` after what the stream was given so far; throws CudaError.
  void submit(std::function<void()> work);
  // Throws what a piece of work threw, once (call after waiting for the stream).
  void rethrow_failure();

 private:
  struct Failure {
    std::mutex mutex;
    std::exception_ptr error;
  };
  struct Task {
    std::function<void()> work;
    std::shared_ptr<Failure> failure;
  };
  static void CUDART_CB run(void* task) noexcept;

  kernels::cuda::Stream stream_;
  std::shared_ptr<Failure> failure_;
};

}  // namespace strata::cuda
