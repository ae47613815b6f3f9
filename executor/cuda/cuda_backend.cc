// The CUDA backend's primitives (see cuda_backend.h).
#include "executor/cuda/cuda_backend.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/partition.h"
#include "executor/comm/group_streams.h"
#include "executor/cuda/communicator_factories.h"
#include "executor/cuda/host_staged_communicator.h"
#ifdef STRATA_HAVE_NCCL
#include "executor/cuda/nccl_communicator.h"
#endif
#include "executor/cuda/pinned_host_buffer.h"
#include "executor/cuda/seeded_init.h"
#include "executor/cuda/system_error.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"

namespace strata::cuda {
namespace kc = kernels::cuda;

namespace {

class PinnedStorage final : public engine::Tensor::Storage {
 public:
  explicit PinnedStorage(PinnedHostBuffer b) : buffer(std::move(b)) {}
  PinnedHostBuffer buffer;
};

std::vector<kc::AdamWTensor> kernel_tensors(const std::vector<engine::AdamWSpan>& tensors) {
  std::vector<kc::AdamWTensor> list;
  list.reserve(tensors.size());
  for (const engine::AdamWSpan& t : tensors) {
    list.push_back({t.master, t.grad, t.m, t.v, static_cast<kc::bf16*>(t.copy), t.n, t.decayed});
  }
  return list;
}

bool is_host_memory(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();  // plain pageable memory on older runtimes: host
    return true;
  }
  return attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged;
}

}  // namespace

CudaBackend::CudaBackend(AccountingAllocator& alloc, const engine::RankPlace& place,
                         const CudaBackendOptions& options)
    : alloc_(&alloc), host_comms_(place.host) {
  set_up_device(place.device, options);
  if (options.ranks_per_gpu > 1 || place.ranks_are_threads) {
    comms_ = std::make_unique<HostStagedCommunicatorFactory>(*host_comms_, group_streams());
  } else {
#ifdef STRATA_HAVE_NCCL
    comms_ = std::make_unique<NcclCommunicatorFactory>(*host_comms_, group_streams());
    nccl_ = true;
#else
    comms_ = std::make_unique<HostStagedCommunicatorFactory>(*host_comms_, group_streams());
#endif
  }
}

void CudaBackend::set_up_device(int device_index, const CudaBackendOptions& options) {
  as_system_error([&] {
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    if (devices < 1) throw SystemError("cuda backend: cudaGetDeviceCount found no device");
    device_ = device_index % devices;
    CUDA_CHECK(cudaSetDevice(device_));
    compute_ = kc::Stream::create();
    comm_ = kc::Stream::create();
    copy_ = kc::Stream::create();
    p2p_ = kc::Stream::create();
    for (auto& link : links_) link = kc::Stream::create();
    host_ = HostFunctionStream::create();
    norm_ = kc::DeviceBuffer((1 + kc::kSumOfSquaresScratchDoubles) * sizeof(double));
  });
  host_stream_apart_ = options.host_stream;
  capture_steps_ = options.capture_steps;
  pool_ = std::make_unique<DevicePool>(*alloc_, compute_.get());
  ops_ = std::make_unique<CudaLayerOps>(*pool_, compute_.get(), options.attention);
  if (options.kernel_trace) ops_->trace_kernels([this] { return timestamp(Stream::kCompute); });
}

void CudaBackend::bind_to_calling_thread() {
  as_system_error([&] { CUDA_CHECK(cudaSetDevice(device_)); });
}

GroupStreams CudaBackend::group_streams() const {
  // Which stream each group runs on is decided in group_streams.h, for this backend and for
  // the CPU backend's CUDA-semantics mode alike.
  const auto of = [this](GroupKind kind) -> cudaStream_t {
    switch (group_stream(kind)) {
      case GroupStream::kCompute: return compute_.get();
      case GroupStream::kP2p: return p2p_.get();
      case GroupStream::kComm:
      case GroupStream::kLinkSend:
      case GroupStream::kLinkRecv: break;
    }
    return comm_.get();
  };
  static_assert(kLinkStreamsPerDirection == 2, "links_ holds two streams per direction");
  GroupStreams streams;
  streams.world = of(GroupKind::kWorld);
  streams.tp = of(GroupKind::kTp);
  streams.dp = of(GroupKind::kDp);
  streams.pp = of(GroupKind::kPp);
  streams.model = of(GroupKind::kModel);
  streams.embedding = of(GroupKind::kEmbedding);
  streams.pipe_send = {links_[0].get(), links_[1].get()};
  streams.pipe_recv = {links_[2].get(), links_[3].get()};
  return streams;
}

CudaBackend::~CudaBackend() {
  // Work in flight may still read memory the pool is about to free.
  cudaDeviceSynchronize();
}


cudaStream_t CudaBackend::stream_of(Stream s) const {
  switch (s) {
    case Stream::kCompute: return compute_.get();
    case Stream::kHost: return host_.get();
    case Stream::kComm: return comm_.get();
    case Stream::kCopy: return copy_.get();
    case Stream::kP2p: return p2p_.get();
  }
  return compute_.get();
}

engine::Tensor CudaBackend::allocate(MemoryTier tier, DType dtype, std::int64_t n,
                                     const std::string& tag, bool zeroed) {
  const std::int64_t bytes = pool_request_bytes(dtype, n);
  if (tier == MemoryTier::kDevice) {
    DeviceBlock block = zeroed ? pool_->allocate(bytes, tag) : pool_->allocate_uninitialized(bytes, tag);
    return tensor_of(std::move(block), dtype);
  }
  if (tier != MemoryTier::kHost) {
    throw std::invalid_argument("cuda backend: the nvme tier holds no memory (use the NvmeStore)");
  }
  PinnedHostBuffer buffer = PinnedHostBuffer::allocate(
      *alloc_, bytes, tag, zeroed ? Fill::kZero : Fill::kUninitialized);
  void* data = buffer.data();
  return engine::Tensor(data, n, dtype, MemoryTier::kHost,
                        std::make_unique<PinnedStorage>(std::move(buffer)));
}

void CudaBackend::release_after(engine::Tensor t, Stream stream) {
  if (t.tier() == MemoryTier::kDevice && stream_of(stream) != compute_.get()) {
    wait(Stream::kCompute, record(stream));
  }
  t.reset();
}

void CudaBackend::zero(void* data, DType dtype, std::int64_t n, Stream stream) {
  as_system_error([&] {
    CUDA_CHECK(cudaMemsetAsync(data, 0, static_cast<std::size_t>(n * dtype_bytes(dtype)),
                               stream_of(stream)));
  });
}

void CudaBackend::fill(float* data, float value, std::int64_t n) {
  const std::vector<float> host(static_cast<std::size_t>(n), value);
  as_system_error([&] {
    CUDA_CHECK(cudaMemcpyAsync(data, host.data(), host.size() * sizeof(float),
                               cudaMemcpyHostToDevice, compute_.get()));
    CUDA_CHECK(cudaStreamSynchronize(compute_.get()));
  });
}

double CudaBackend::sum_of_squares(const float* data, std::int64_t n) {
  return sum_of_squares_over({{data, n}});
}

double CudaBackend::sum_of_squares_over(const std::vector<engine::FloatSpan>& spans) {
  double result = 0;
  as_system_error([&] {
    // The device adds each span's total into *sum in order from 0: the host's sum's bits.
    double* sum = norm_.as<double>();
    CUDA_CHECK(cudaMemsetAsync(sum, 0, sizeof(double), compute_.get()));
    for (const engine::FloatSpan& s : spans) {
      kc::sum_of_squares(sum, sum + 1, s.data, s.n, compute_.get());
    }
    CUDA_CHECK(cudaMemcpyAsync(&result, sum, sizeof(double), cudaMemcpyDeviceToHost, compute_.get()));
    CUDA_CHECK(cudaStreamSynchronize(compute_.get()));
  });
  return result;
}

void CudaBackend::adamw(const std::vector<engine::AdamWSpan>& tensors,
                        const engine::AdamWStep& hp, float grad_scale) {
  kc::adamw_update(kernel_tensors(tensors),
                   kc::AdamWParams{hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay},
                   hp.step, grad_scale, compute_.get());
}

void CudaBackend::adamw_from_device(const std::vector<engine::AdamWSpan>& tensors,
                                    const engine::AdamWStep& hp,
                                    const engine::DeviceStepScalars* scalars) {
  kc::adamw_update_from_device(kernel_tensors(tensors),
                               kc::AdamWParams{hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay},
                               &scalars->values, compute_.get());
}

void CudaBackend::sum_squares_on_device(const std::vector<std::vector<engine::FloatSpan>>& groups,
                                        double* sum) {
  std::vector<std::vector<kc::SquaredSpan>> spans;
  spans.reserve(groups.size());
  for (const auto& group : groups) {
    std::vector<kc::SquaredSpan>& out = spans.emplace_back();
    for (const engine::FloatSpan& s : group) out.push_back({s.data, s.n});
  }
  as_system_error([&] { kc::sum_of_squares_groups(sum, spans, norm_.as<double>(), compute_.get()); });
}

void CudaBackend::clip_factor_on_device(float max_norm, engine::DeviceStepScalars* scalars) {
  as_system_error([&] {
    kc::clip_scale_from_sum(&scalars->values.grad_scale, &scalars->grad_sq, max_norm,
                            compute_.get());
  });
}

void CudaBackend::to_compute(void* dst, const float* src, std::int64_t n, Stream stream) {
  kc::cast_to_bf16(static_cast<kc::bf16*>(dst), src, n, stream_of(stream));
}

bool CudaBackend::init_seeded(float* dst, const UnitLayout& unit, std::uint64_t seed,
                              std::int64_t begin, std::int64_t end) {
  as_system_error([&] { draw_seeded_on_device(dst, unit, seed, begin, end, compute_.get()); });
  return true;
}

void CudaBackend::copy(void* dst, const void* src, std::int64_t bytes, Stream stream) {
  const bool host_side = is_host_memory(dst) || is_host_memory(src);
  as_system_error([&] {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes), cudaMemcpyDefault,
                               stream_of(stream)));
    // The host reads (or reuses) host memory on return.
    if (host_side) CUDA_CHECK(cudaStreamSynchronize(stream_of(stream)));
  });
}

void CudaBackend::copy_async(void* dst, const void* src, std::int64_t bytes, Stream stream) {
  as_system_error([&] {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes), cudaMemcpyDefault,
                               stream_of(stream)));
  });
}

cudaEvent_t CudaBackend::event(int mark) const {
  if (mark >= kHostMarkBase) return host_events_.at(static_cast<std::size_t>(mark - kHostMarkBase)).get();
  return events_.at(static_cast<std::size_t>(mark)).get();
}

void CudaBackend::run_on_host_stream(const std::string&, std::vector<engine::HostTouch>,
                                     std::function<void()> work) {
  if (!host_stream_apart_) {
    work();
    return;
  }
  as_system_error([&] { host_.submit(std::move(work)); });
}

int CudaBackend::record(Stream stream) {
  if (stream == Stream::kHost) {
    const int slot = next_host_event_++ % kHostMarks;
    as_system_error([&] {
      while (host_events_.size() <= static_cast<std::size_t>(slot)) {
        host_events_.push_back(kc::Event::create(/*timing=*/true));
      }
      host_events_[static_cast<std::size_t>(slot)].record(host_.get());
    });
    return kHostMarkBase + slot;
  }
  as_system_error([&] {
    if (next_event_ == static_cast<int>(events_.size())) {
      events_.push_back(kc::Event::create(/*timing=*/true));
    }
    events_[static_cast<std::size_t>(next_event_)].record(stream_of(stream));
  });
  return next_event_++;
}

void CudaBackend::wait(Stream waiter, int mark) {
  if (mark < 0) return;
  as_system_error([&] { CUDA_CHECK(cudaStreamWaitEvent(stream_of(waiter), event(mark), 0)); });
}

void CudaBackend::wait(Communicator& comm, int mark) {
  if (mark < 0) return;
  cudaStream_t stream = nullptr;
  if (const auto* staged = dynamic_cast<const HostStagedCommunicator*>(&comm)) {
    stream = staged->stream();
#ifdef STRATA_HAVE_NCCL
  } else if (const auto* nccl = dynamic_cast<const NcclCommunicator*>(&comm)) {
    stream = nccl->stream();
#endif
  } else {
    throw std::logic_error("cuda backend: a communicator this backend did not make");
  }
  as_system_error([&] { CUDA_CHECK(cudaStreamWaitEvent(stream, event(mark), 0)); });
}

void CudaBackend::synchronize_device() {
  as_system_error([&] {
    for (cudaStream_t s : {compute_.get(), comm_.get(), copy_.get(), p2p_.get(), links_[0].get(),
                           links_[1].get(), links_[2].get(), links_[3].get()}) {
      CUDA_CHECK(cudaStreamSynchronize(s));
    }
  });
  host_.rethrow_failure();
}

void CudaBackend::synchronize() {
  as_system_error([&] { CUDA_CHECK(cudaStreamSynchronize(host_.get())); });
  synchronize_device();
}

void CudaBackend::host_wait(Stream stream) {
  as_system_error([&] { CUDA_CHECK(cudaStreamSynchronize(stream_of(stream))); });
  if (stream == Stream::kHost) host_.rethrow_failure();
}

void CudaBackend::host_wait_for(int mark) {
  if (mark < 0) return;
  as_system_error([&] { CUDA_CHECK(cudaEventSynchronize(event(mark))); });
  if (mark >= kHostMarkBase) host_.rethrow_failure();
}

std::vector<cudaStream_t> CudaBackend::other_streams() const {
  return {comm_.get(),     copy_.get(),     p2p_.get(),      host_.get(),
          links_[0].get(), links_[1].get(), links_[2].get(), links_[3].get()};
}

int CudaBackend::timestamp(Stream stream) {
  if (!capturing_) return record(stream);
  as_system_error([&] {
    if (next_event_ == static_cast<int>(events_.size())) {
      events_.push_back(kc::Event::create(/*timing=*/true));
    }
    CUDA_CHECK(cudaEventRecordWithFlags(events_[static_cast<std::size_t>(next_event_)].get(),
                                        stream_of(stream), cudaEventRecordExternal));
  });
  return next_event_++;
}

void CudaBackend::begin_capture() {
  if (!capture_steps_) Backend::begin_capture();
  as_system_error([&] { CapturedGraph::begin(compute_.get(), other_streams(), capture_joins_); });
  capturing_ = true;
}

void CudaBackend::end_capture() {
  capturing_ = false;
  as_system_error([&] {
    graph_ = CapturedGraph::end(compute_.get(), other_streams(), capture_joins_);
  });
}

void CudaBackend::launch_graph() {
  if (graph_.empty()) throw std::logic_error("cuda backend: launch_graph without a captured graph");
  as_system_error([&] { graph_.launch(compute_.get()); });
}

double CudaBackend::seconds_between(int origin, int mark) {
  float ms = 0;
  as_system_error([&] { CUDA_CHECK(cudaEventElapsedTime(&ms, event(origin), event(mark))); });
  return static_cast<double>(ms) * 1e-3;
}

engine::BackendMaker cuda_backend_maker(const CudaBackendOptions& options) {
  return [options](AccountingAllocator& alloc,
                   const engine::RankPlace& place) -> std::unique_ptr<engine::Backend> {
    return std::make_unique<CudaBackend>(alloc, place, options);
  };
}

}  // namespace strata::cuda
