// The CPU backend with CUDA's semantics (see cuda_semantics_backend.h). Each primitive says
// which stream the CUDA backend runs it on and whether the host waits (cuda_backend.cc).
#include "executor/cpu/cuda_semantics/cuda_semantics_backend.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <limits>
#include <stdexcept>
#include <utility>

#include "executor/memory/pool_size_class.h"

namespace strata::cuda_semantics {
namespace {

Access reads(const void* p, std::int64_t bytes) { return Access{p, bytes, false}; }
Access writes(const void* p, std::int64_t bytes) { return Access{p, bytes, true}; }

// What an AdamW launch over `tensors` reads and writes: each tensor's master, gradient and
// moments, and its compute copy where it has one apart.
std::vector<Access> adamw_accesses(const std::vector<engine::AdamWSpan>& tensors) {
  std::vector<Access> accesses;
  for (const engine::AdamWSpan& t : tensors) {
    const std::int64_t bytes = t.n * 4;
    for (const void* p : {static_cast<const void*>(t.master), static_cast<const void*>(t.grad),
                          static_cast<const void*>(t.m), static_cast<const void*>(t.v)}) {
      accesses.push_back(reads(p, bytes));
      accesses.push_back(writes(p, bytes));
    }
    if (t.copy != nullptr && t.copy != t.master) accesses.push_back(writes(t.copy, bytes));
  }
  return accesses;
}

}  // namespace

// A pool block's owner: gives the block back to the pool, in compute-stream order.
class CudaSemanticsBackend::PoolStorage final : public engine::Tensor::Storage {
 public:
  PoolStorage(CudaSemanticsBackend& backend, Buffer buffer, std::string tag)
      : backend_(&backend), buffer_(std::move(buffer)), tag_(std::move(tag)) {}
  PoolStorage(CudaSemanticsBackend& backend, engine::Tensor adopted, std::string tag)
      : backend_(&backend), adopted_(std::move(adopted)), tag_(std::move(tag)) {}
  ~PoolStorage() override {
    if (!adopted_.empty()) {
      backend_->free_adopted(std::move(adopted_), tag_);
    } else {
      backend_->free_block(std::move(buffer_), tag_);
    }
  }
  PoolStorage(const PoolStorage&) = delete;
  PoolStorage& operator=(const PoolStorage&) = delete;

 private:
  CudaSemanticsBackend* backend_;
  Buffer buffer_;
  engine::Tensor adopted_;
  std::string tag_;
};

// A pinned host buffer's owner: its free is a host write the checker sees.
class CudaSemanticsBackend::PinnedStorage final : public engine::Tensor::Storage {
 public:
  PinnedStorage(CudaSemanticsBackend& backend, engine::Tensor host, std::string tag)
      : backend_(&backend), host_(std::move(host)), tag_(std::move(tag)) {}
  ~PinnedStorage() override { backend_->free_pinned(std::move(host_), tag_); }
  PinnedStorage(const PinnedStorage&) = delete;
  PinnedStorage& operator=(const PinnedStorage&) = delete;

 private:
  CudaSemanticsBackend* backend_;
  engine::Tensor host_;
  std::string tag_;
};

CudaSemanticsBackend::CudaSemanticsBackend(AccountingAllocator& alloc, CommunicatorFactory& host,
                                           bool capture_steps)
    : alloc_(&alloc),
      capture_steps_(capture_steps),
      comms_(host, scheduler_),
      cpu_(alloc, host),
      ops_(alloc, *this, scheduler_) {}

CudaSemanticsBackend::~CudaSemanticsBackend() {
  // Queued work may still read blocks the members are about to free.
  try {
    synchronize();
  } catch (...) {
    // A race found while tearing down has nobody left to report to.
  }
}

engine::Tensor CudaSemanticsBackend::device_block(DType dtype, std::int64_t n,
                                                  const std::string& tag) {
  const std::int64_t bytes = n * dtype_bytes(dtype);
  // Served from a block of the request's size class, as the CUDA pool serves it: a freed
  // block goes to any later request of its class, whatever its dtype or exact size.
  const std::int64_t class_bytes = bytes > 0 ? pool_size_class(bytes) : 0;
  Buffer buffer;
  auto cached = cache_.find(class_bytes);
  if (cached != cache_.end() && !cached->second.empty()) {
    buffer = std::move(cached->second.back());  // the last freed of this class: at once
    cached->second.pop_back();
    scheduler_.checker().rename_block(buffer.data(), tag);
  } else {
    buffer = alloc_->allocate(MemoryTier::kDevice, class_bytes, tag, Fill::kUninitialized);
    if (class_bytes > 0) {
      // Never used yet: NaN, so a read before any write shows.
      const float nan = std::numeric_limits<float>::quiet_NaN();
      float* f = static_cast<float*>(buffer.data());
      for (std::int64_t i = 0; i < class_bytes / 4; ++i) f[i] = nan;
      scheduler_.checker().add_block(buffer.data(), class_bytes, tag);
    }
  }
  void* data = buffer.data();
  return engine::Tensor(data, n, dtype, MemoryTier::kDevice,
                        std::make_unique<PoolStorage>(*this, std::move(buffer), tag));
}

engine::Tensor CudaSemanticsBackend::adopt(engine::Tensor t, const std::string& tag) {
  if (t.empty()) return t;
  void* data = t.data();
  const std::int64_t n = t.size();
  const DType dtype = t.dtype();
  const MemoryTier tier = t.tier();
  scheduler_.checker().add_block(data, t.bytes(), tag);
  return engine::Tensor(data, n, dtype, tier, std::make_unique<PoolStorage>(*this, std::move(t), tag));
}

void CudaSemanticsBackend::free_block(Buffer buffer, const std::string& tag) noexcept {
  if (buffer.bytes() == 0) return;
  scheduler_.enqueue_free(buffer.data(), buffer.bytes(), tag);
  std::vector<Buffer>& list = cache_[buffer.bytes()];
  list.push_back(std::move(buffer));
}

void CudaSemanticsBackend::free_adopted(engine::Tensor t, const std::string& tag) noexcept {
  scheduler_.enqueue_free(t.data(), t.bytes(), tag);
  adopted_freed_.push_back(std::move(t));
}

void CudaSemanticsBackend::free_pinned(engine::Tensor t, const std::string& tag) noexcept {
  scheduler_.host_free(t.data(), t.bytes(), tag);
  scheduler_.checker().remove_block(t.data());
  t.reset();
}

void CudaSemanticsBackend::release_cache() {
  for (auto& [bytes, list] : cache_) {
    for (Buffer& b : list) scheduler_.checker().remove_block(b.data());
  }
  cache_.clear();
  for (engine::Tensor& t : adopted_freed_) scheduler_.checker().remove_block(t.data());
  adopted_freed_.clear();
}

engine::Tensor CudaSemanticsBackend::allocate(MemoryTier tier, DType dtype, std::int64_t n,
                                              const std::string& tag, bool zeroed) {
  if (tier != MemoryTier::kDevice) {
    // Host memory, pinned on CUDA: copies may read or write it while the host goes on.
    engine::Tensor host = cpu_.allocate(tier, dtype, n, tag, zeroed);
    if (host.bytes() == 0) return host;
    void* data = host.data();
    scheduler_.checker().add_block(data, host.bytes(), tag, BlockKind::kPinnedHost);
    return engine::Tensor(data, n, dtype, tier,
                          std::make_unique<PinnedStorage>(*this, std::move(host), tag));
  }
  engine::Tensor t = device_block(dtype, n, tag);
  if (zeroed && n > 0) zero(t.data(), dtype, n, Stream::kCompute);  // the pool's memset
  return t;
}

void CudaSemanticsBackend::release_after(engine::Tensor t, Stream stream) {
  // As the CUDA backend: the compute stream waits for the other stream first.
  if (t.tier() == MemoryTier::kDevice && sim_stream_of(stream) != SimStream::kCompute) {
    wait(Stream::kCompute, record(stream));
  }
  t.reset();
}

void CudaSemanticsBackend::zero(void* data, DType dtype, std::int64_t n, Stream stream) {
  const std::int64_t bytes = n * dtype_bytes(dtype);
  scheduler_.enqueue(sim_stream_of(stream), "zero", {writes(data, bytes)},
                     [=, this] { cpu_.zero(data, dtype, n, stream); });
}

void CudaSemanticsBackend::fill(float* data, float value, std::int64_t n) {
  scheduler_.enqueue(SimStream::kCompute, "fill", {writes(data, n * 4)},
                     [=, this] { cpu_.fill(data, value, n); });
  host_wait(Stream::kCompute);  // the CUDA backend copies from a host vector it then frees
}

double CudaSemanticsBackend::sum_of_squares(const float* data, std::int64_t n) {
  double result = 0;
  scheduler_.enqueue(SimStream::kCompute, "sum_of_squares", {reads(data, n * 4)},
                     [&, data, n] { result = cpu_.sum_of_squares(data, n); });
  host_wait(Stream::kCompute);
  return result;
}

void CudaSemanticsBackend::adamw(const std::vector<engine::AdamWSpan>& tensors,
                                 const engine::AdamWStep& hp, float grad_scale) {
  const std::vector<Access> accesses = adamw_accesses(tensors);
  // One kernel, as the CUDA backend's fused launch.
  scheduler_.enqueue(SimStream::kCompute, "adamw", accesses,
                     [=, this] { cpu_.adamw(tensors, hp, grad_scale); });
}

void CudaSemanticsBackend::adamw_from_device(const std::vector<engine::AdamWSpan>& tensors,
                                             const engine::AdamWStep& hp,
                                             const engine::DeviceStepScalars* scalars) {
  std::vector<Access> accesses = adamw_accesses(tensors);
  accesses.push_back(reads(scalars, sizeof(engine::DeviceStepScalars)));
  // The scalars are read when the kernel runs, as the CUDA kernel reads them.
  scheduler_.enqueue(SimStream::kCompute, "adamw", accesses,
                     [=, this] { cpu_.adamw_from_device(tensors, hp, scalars); });
}

void CudaSemanticsBackend::sum_squares_on_device(
    const std::vector<std::vector<engine::FloatSpan>>& groups, double* sum) {
  std::vector<Access> accesses{writes(sum, sizeof(double))};
  for (const auto& group : groups) {
    for (const engine::FloatSpan& s : group) accesses.push_back(reads(s.data, s.n * 4));
  }
  scheduler_.enqueue(SimStream::kCompute, "sum_squares_on_device", accesses,
                     [=, this] { cpu_.sum_squares_on_device(groups, sum); });
}

void CudaSemanticsBackend::clip_factor_on_device(float max_norm,
                                                 engine::DeviceStepScalars* scalars) {
  scheduler_.enqueue(SimStream::kCompute, "clip_factor_on_device",
                     {reads(&scalars->grad_sq, sizeof(double)),
                      writes(&scalars->values.grad_scale, sizeof(float))},
                     [=, this] { cpu_.clip_factor_on_device(max_norm, scalars); });
}

void CudaSemanticsBackend::to_compute(void* dst, const float* src, std::int64_t n,
                                      Stream stream) {
  scheduler_.enqueue(sim_stream_of(stream), "to_compute", {reads(src, n * 4), writes(dst, n * 4)},
                     [=, this] { cpu_.to_compute(dst, src, n); });
}

void CudaSemanticsBackend::copy(void* dst, const void* src, std::int64_t bytes, Stream stream) {
  RaceChecker& blocks = scheduler_.checker();
  const bool host_side = blocks.kind_of(dst) != BlockKind::kDevice ||
                         blocks.kind_of(src) != BlockKind::kDevice;
  const SimStream s = sim_stream_of(stream);
  scheduler_.enqueue(s, "copy", {reads(src, bytes), writes(dst, bytes)},
                     [=, this] { cpu_.copy(dst, src, bytes, stream); });
  // The host reads (or reuses) host memory on return.
  if (host_side) host_wait(stream);
}

void CudaSemanticsBackend::copy_async(void* dst, const void* src, std::int64_t bytes,
                                      Stream stream) {
  RaceChecker& blocks = scheduler_.checker();
  const SimStream s = sim_stream_of(stream);
  if (!blocks.kind_of(src)) {
    // From pageable memory: CUDA stages the source before the call returns, so the host may
    // write it at once; the device side lands later, on the stream.
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + bytes);
    scheduler_.enqueue(s, "copy_async (staged)", {writes(dst, bytes)},
                       [=] { std::memcpy(dst, staged->data(), static_cast<std::size_t>(bytes)); });
  } else {
    scheduler_.enqueue(s, "copy_async", {reads(src, bytes), writes(dst, bytes)},
                       [=, this] { cpu_.copy(dst, src, bytes, stream); });
  }
  // Into pageable memory the call returns once the copy is done.
  if (!blocks.kind_of(dst)) host_wait(stream);
}

void CudaSemanticsBackend::on_host(const std::string& op,
                                   std::initializer_list<engine::HostTouch> touches,
                                   const std::function<void()>& work) {
  std::vector<Access> accesses;
  accesses.reserve(touches.size());
  for (const engine::HostTouch& t : touches) accesses.push_back(Access{t.data, t.bytes, t.write});
  scheduler_.host_op(op, accesses, work);
}

void CudaSemanticsBackend::run_on_host_stream(const std::string& op, std::vector<engine::HostTouch> touches,
                                              std::function<void()> work) {
  std::vector<Access> accesses;
  accesses.reserve(touches.size());
  for (const engine::HostTouch& t : touches) accesses.push_back(Access{t.data, t.bytes, t.write});
  scheduler_.enqueue(SimStream::kHostFunctions, op, accesses, std::move(work));
}

int CudaSemanticsBackend::record(Stream stream) {
  if (stream == Stream::kHost) {
    if (host_marks_.size() < static_cast<std::size_t>(kHostMarks)) host_marks_.resize(kHostMarks);
    const int slot = next_host_mark_++ % kHostMarks;
    host_marks_[static_cast<std::size_t>(slot)] = scheduler_.record(sim_stream_of(stream));
    return kHostMarkBase + slot;
  }
  marks_.push_back(scheduler_.record(sim_stream_of(stream)));
  return static_cast<int>(marks_.size()) - 1;
}

const StreamScheduler::Mark& CudaSemanticsBackend::mark_at(int mark) const {
  if (mark >= kHostMarkBase) return host_marks_.at(static_cast<std::size_t>(mark - kHostMarkBase));
  return marks_.at(static_cast<std::size_t>(mark));
}

void CudaSemanticsBackend::wait(Stream waiter, int mark) {
  if (mark < 0) return;
  scheduler_.wait(sim_stream_of(waiter), mark_at(mark));
}

void CudaSemanticsBackend::wait(Communicator& comm, int mark) {
  if (mark < 0) return;
  auto* streamed = dynamic_cast<StreamedCommunicator*>(&comm);
  if (streamed == nullptr) {
    throw std::logic_error("cuda semantics: a communicator this backend did not make");
  }
  scheduler_.wait(streamed->stream(), mark_at(mark));
}

void CudaSemanticsBackend::synchronize() {
  scheduler_.synchronize();
  // A captured graph holds the addresses of the cached blocks it uses as scratch.
  if (!scheduler_.has_graph()) release_cache();
}

void CudaSemanticsBackend::begin_capture() {
  if (!capture_steps_) Backend::begin_capture();
  scheduler_.begin_capture();
}

void CudaSemanticsBackend::end_capture() { scheduler_.end_capture(); }

void CudaSemanticsBackend::launch_graph() { scheduler_.launch(); }

void CudaSemanticsBackend::drop_graph() {
  scheduler_.drop_graph();
  if (scheduler_.idle()) release_cache();
}

std::vector<FreeBlock> CudaSemanticsBackend::free_blocks() const {
  std::vector<FreeBlock> blocks;
  for (const auto& [bytes, list] : cache_) {
    for (const Buffer& b : list) blocks.push_back({b.data(), bytes});
  }
  std::sort(blocks.begin(), blocks.end());
  return blocks;
}

void CudaSemanticsBackend::host_wait(Stream stream) { scheduler_.host_wait(sim_stream_of(stream)); }

void CudaSemanticsBackend::host_wait_for(int mark) {
  if (mark < 0) return;
  scheduler_.host_wait(mark_at(mark));
}

int CudaSemanticsBackend::timestamp(Stream stream) {
  return scheduler_.timestamp(sim_stream_of(stream));
}

double CudaSemanticsBackend::seconds_between(int origin, int mark) {
  return scheduler_.seconds_between(origin, mark);
}

void CudaSemanticsBackend::clear_timestamps() {
  scheduler_.clear_timestamps();
  marks_.clear();
}

engine::BackendMaker cuda_semantics_backend_maker(bool capture_steps) {
  return [capture_steps](AccountingAllocator& alloc,
                         const engine::RankPlace& place) -> std::unique_ptr<engine::Backend> {
    return std::make_unique<CudaSemanticsBackend>(alloc, *place.host, capture_steps);
  };
}

}  // namespace strata::cuda_semantics
