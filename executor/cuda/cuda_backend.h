// The CUDA backend (executor/engine/backend.h): one GPU per process (or one GPU shared by
// several processes, --ranks-per-gpu), bf16 mixed precision through kernels/cuda, device
// memory from the accounted DevicePool, pinned host memory for the host tier, and one CUDA
// stream per Program stream (compute, comm, copy, p2p, and the host stream: host functions on
// a stream of their own, host_function_stream.h). The communicators are NCCL's, bootstrapped over MPI, with the TP group
// on the compute stream (its collectives sit between dependent kernels), DP / world /
// embedding groups on the comm stream and the pipeline group on the p2p stream; or, when
// processes share a GPU, host-staged communicators over MPI on the same streams.
//
// Ordering: record()/wait() are CUDA events; release_after() of memory used on another
// stream makes the compute stream wait for that stream first (the pool hands memory out in
// compute-stream order), which keeps every reuse safe at the price of that wait.
// Deliberately not here: the model's math (cuda_layer_ops.h), choosing the device for a
// rank beyond `local rank mod devices` (the launcher checks the counts).
#pragma once

#include <memory>
#include <vector>

#include <cuda_runtime.h>

#include "executor/comm/communicator_factory.h"
#include "executor/cuda/communicator_factories.h"
#include "executor/cuda/cuda_layer_ops.h"
#include "executor/cuda/captured_graph.h"
#include "executor/cuda/device_pool.h"
#include "executor/cuda/host_function_stream.h"
#include "executor/engine/backend.h"
#include "kernels/cuda/cuda_resources.h"

namespace strata::cuda {

struct CudaBackendOptions {
  // Processes that share one GPU (host-staged communicators instead of NCCL when > 1).
  int ranks_per_gpu = 1;
  // Every layer op timed on its own (two events around it): the step's trace gets a span per
  // op (timed_kernels), at the price of the events between the ops.
  bool kernel_trace = false;
  // Attention through cuDNN's fused SDPA where it is found and agrees with strata's kernels
  // (auto), always (cudnn), or never (kernels): kernels/cuda/attention_launcher.h.
  kernels::cuda::AttentionMode attention = kernels::cuda::AttentionMode::kAuto;
  // Host-memory-only host work (the CPU AdamW of a plan whose ZeRO-3 state is all in host
  // memory) runs as host functions on a stream of its own, beside the issue of the GPU's work
  // (`strata run --no-host-stream`: on the issuing thread instead).
  bool host_stream = true;
  // Steps captured once as a CUDA graph and replayed where the plan allows (engine.h,
  // "Captured steps"; `strata run --cuda-graphs`).
  bool capture_steps = false;
};

class CudaBackend final : public engine::Backend {
 public:
  // Selects the device (place.device mod the device count), creates the streams, the pool
  // and the device communicators, bootstrapped over place.host (which must outlive the
  // backend): NCCL's, or host-staged ones where ranks share a GPU or are threads.
  CudaBackend(AccountingAllocator& alloc, const engine::RankPlace& place,
              const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  strata::Backend kind() const override { return strata::Backend::kCuda; }
  AccountingAllocator& accounting() override { return *alloc_; }

  engine::Tensor allocate(MemoryTier tier, DType dtype, std::int64_t n, const std::string& tag,
                          bool zeroed = true) override;
  void release_after(engine::Tensor t, Stream stream) override;
  model::LayerOps& layer_ops() override { return *ops_; }
  CommunicatorFactory& communicators() override { return *comms_; }

  void zero(void* data, DType dtype, std::int64_t n, Stream stream) override;
  void fill(float* data, float value, std::int64_t n) override;
  double sum_of_squares(const float* data, std::int64_t n) override;
  double sum_of_squares_over(const std::vector<engine::FloatSpan>& spans) override;
  void adamw(const std::vector<engine::AdamWSpan>& tensors, const engine::AdamWStep& hp,
             float grad_scale) override;
  void adamw_from_device(const std::vector<engine::AdamWSpan>& tensors, const engine::AdamWStep& hp,
                         const engine::DeviceStepScalars* scalars) override;
  void sum_squares_on_device(const std::vector<std::vector<engine::FloatSpan>>& groups,
                             double* sum) override;
  void clip_factor_on_device(float max_norm, engine::DeviceStepScalars* scalars) override;
  void to_compute(void* dst, const float* src, std::int64_t n, Stream stream = Stream::kCompute) override;
  bool init_seeded(float* dst, const UnitLayout& unit, std::uint64_t seed, std::int64_t begin,
                   std::int64_t end) override;  // on the GPU (seeded_init.h)
  void copy(void* dst, const void* src, std::int64_t bytes, Stream stream) override;
  void copy_async(void* dst, const void* src, std::int64_t bytes, Stream stream) override;

  int record(Stream stream) override;
  void wait(Stream waiter, int mark) override;
  void wait(Communicator& comm, int mark) override;
  void synchronize() override;
  void synchronize_device() override;
  void host_wait(Stream stream) override;
  void host_wait_for(int mark) override;
  void bind_to_calling_thread() override;
  void run_on_host_stream(const std::string& op, std::vector<engine::HostTouch> touches,
                          std::function<void()> work) override;
  bool host_stream_apart() const override { return host_stream_apart_; }
  bool host_stream_host_memory_only() const override { return true; }

  // While capturing, an event record node of the graph (cudaEventRecordExternal): each launch
  // records it, so the captured step's ops are timed as an eager step's are.
  int timestamp(Stream stream) override;
  double seconds_between(int origin, int mark) override;
  void clear_timestamps() override {
    next_event_ = 0;
    ops_->clear_spans();
  }
  std::vector<engine::TimedKernel> timed_kernels() const override { return ops_->spans(); }
  std::vector<std::string> notes() const override { return ops_->attention_notes(); }

  bool captures_steps() const override { return capture_steps_; }
  bool collectives_on_device() const override { return nccl_; }
  void begin_capture() override;
  void end_capture() override;
  void launch_graph() override;
  void drop_graph() override { graph_ = CapturedGraph(); }
  std::vector<FreeBlock> free_blocks() const override { return pool_->free_blocks(); }

  int device() const { return device_; }
  DevicePoolStats pool_stats() const { return pool_->stats(); }

 private:
  cudaStream_t stream_of(Stream s) const;
  // Every stream a step may issue work on but the compute stream (a capture's joined streams).
  std::vector<cudaStream_t> other_streams() const;
  cudaEvent_t event(int mark) const;
  // The device, streams, pool and layer ops: everything but the communicators.
  void set_up_device(int device_index, const CudaBackendOptions& options);
  GroupStreams group_streams() const;

  AccountingAllocator* alloc_;
  CommunicatorFactory* host_comms_ = nullptr;  // bootstraps the device communicators
  int device_ = 0;
  kernels::cuda::Stream compute_, comm_, copy_, p2p_;
  kernels::cuda::Stream links_[4];  // the pipeline links' streams (process_groups.h)
  std::unique_ptr<DevicePool> pool_;
  std::unique_ptr<CudaLayerOps> ops_;
  std::unique_ptr<CommunicatorFactory> comms_;
  std::vector<kernels::cuda::Event> events_;  // reused every step (clear_timestamps)
  int next_event_ = 0;
  HostFunctionStream host_;
  bool host_stream_apart_ = false;
  // The host stream's marks: a ring numbered from kHostMarkBase on, not cleared with the
  // step's, as a step's carried host work (engine.h) is waited for by the next.
  static constexpr int kHostMarkBase = 1 << 30;
  static constexpr int kHostMarks = 4096;
  std::vector<kernels::cuda::Event> host_events_;
  int next_host_event_ = 0;
  kernels::cuda::DeviceBuffer norm_;          // sum_of_squares: result + partials
  bool capture_steps_ = false;                // CudaBackendOptions::capture_steps
  bool nccl_ = false;                         // the device communicators are NCCL's
  bool capturing_ = false;
  std::vector<kernels::cuda::Event> capture_joins_;
  CapturedGraph graph_;
};

// The CUDA backend's maker (backend.h), for `strata run --backend cuda` and `strata select` on
// a CUDA cluster alike.
engine::BackendMaker cuda_backend_maker(const CudaBackendOptions& options = {});

}  // namespace strata::cuda
