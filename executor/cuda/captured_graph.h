// CapturedGraph: a rank's step captured from its streams and instantiated as a CUDA graph
// (engine.h, "Captured steps"), replayed with one launch. The capture starts on the origin
// stream (the compute stream) and the others join it at once (each waits for an event recorded
// there), so that work issued on any of them is captured, and at the end the origin waits for
// each of them, so that the graph is whole (CUDA refuses a capture with a stream not joined).
// Relaxed capture mode: the pool's cudaMalloc of a block it lacks is allowed (not captured);
// a host wait on a captured stream is not, and the capture fails (end() throws).
// Deliberately not here: what is captured (the engine), the pool's addresses (DevicePool).
#pragma once

#include <vector>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_resources.h"

namespace strata::cuda {

class CapturedGraph {
 public:
  CapturedGraph() = default;  // holds nothing
  ~CapturedGraph();
  CapturedGraph(CapturedGraph&& other) noexcept;
  CapturedGraph& operator=(CapturedGraph&& other) noexcept;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  // Starts capturing `origin`, with `others` joined to it; `joins` holds the events that join
  // them (kept for the capture's life, one more than others). Throws CudaError.
  static void begin(cudaStream_t origin, const std::vector<cudaStream_t>& others,
                    std::vector<kernels::cuda::Event>& joins);
  // Joins `others` back to `origin`, ends the capture and instantiates the graph. Throws
  // CudaError where the capture failed (the call that broke it is the runtime's error).
  static CapturedGraph end(cudaStream_t origin, const std::vector<cudaStream_t>& others,
                           std::vector<kernels::cuda::Event>& joins);

  bool empty() const { return exec_ == nullptr; }
  void launch(cudaStream_t stream) const;  // throws CudaError

 private:
  CapturedGraph(cudaGraph_t graph, cudaGraphExec_t exec) : graph_(graph), exec_(exec) {}
  void reset() noexcept;

  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace strata::cuda
