// CapturedGraph (see captured_graph.h).
#include "executor/cuda/captured_graph.h"

#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {
namespace {

// `event` recorded on `from`, waited for by `to`: `to` joins from's capture (or the reverse).
void order_after(cudaStream_t to, cudaStream_t from, const kernels::cuda::Event& event) {
  event.record(from);
  CUDA_CHECK(cudaStreamWaitEvent(to, event.get(), 0));
}

void make_events(std::vector<kernels::cuda::Event>& joins, std::size_t count) {
  while (joins.size() < count) joins.push_back(kernels::cuda::Event::create(/*timing=*/false));
}

}  // namespace

CapturedGraph::~CapturedGraph() { reset(); }

CapturedGraph::CapturedGraph(CapturedGraph&& other) noexcept
    : graph_(std::exchange(other.graph_, nullptr)), exec_(std::exchange(other.exec_, nullptr)) {}

CapturedGraph& CapturedGraph::operator=(CapturedGraph&& other) noexcept {
  if (this != &other) {
    reset();
    graph_ = std::exchange(other.graph_, nullptr);
    exec_ = std::exchange(other.exec_, nullptr);
  }
  return *this;
}

void CapturedGraph::reset() noexcept {
  if (exec_ != nullptr) CUDA_CHECK_NOEXCEPT(cudaGraphExecDestroy(exec_));
  if (graph_ != nullptr) CUDA_CHECK_NOEXCEPT(cudaGraphDestroy(graph_));
  exec_ = nullptr;
  graph_ = nullptr;
}

void CapturedGraph::begin(cudaStream_t origin, const std::vector<cudaStream_t>& others,
                          std::vector<kernels::cuda::Event>& joins) {
  make_events(joins, others.size() + 1);
  CUDA_CHECK(cudaStreamBeginCapture(origin, cudaStreamCaptureModeRelaxed));
  joins[0].record(origin);
  for (cudaStream_t s : others) CUDA_CHECK(cudaStreamWaitEvent(s, joins[0].get(), 0));
}

CapturedGraph CapturedGraph::end(cudaStream_t origin, const std::vector<cudaStream_t>& others,
                                 std::vector<kernels::cuda::Event>& joins) {
  cudaGraph_t graph = nullptr;
  try {
    make_events(joins, others.size() + 1);
    for (std::size_t i = 0; i < others.size(); ++i) order_after(origin, others[i], joins[i + 1]);
  } catch (...) {
    // The capture is broken: end it (and drop its graph) before reporting the first error.
    if (cudaStreamEndCapture(origin, &graph) == cudaSuccess && graph != nullptr) {
      cudaGraphDestroy(graph);
    }
    cudaGetLastError();
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(origin, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  if (status != cudaSuccess) {
    cudaGraphDestroy(graph);
    CUDA_CHECK(status);
  }
  return CapturedGraph(graph, exec);
}

void CapturedGraph::launch(cudaStream_t stream) const { CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

}  // namespace strata::cuda
