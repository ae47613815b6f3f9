// The CPU backend's primitives (see cpu_backend.h).
#include "executor/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "executor/model/param_init.h"
#include "executor/runtime/mpi_launch.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/elementwise.h"

namespace strata::cpu_backend {
namespace cpu = strata::kernels::cpu;

engine::Tensor CpuBackend::allocate(MemoryTier tier, DType dtype, std::int64_t n,
                                    const std::string& tag, bool zeroed) {
  // Blocks are reused across steps (host_arena.h): a zero fill the caller does not need is
  // a memset of the whole tensor every step.
  return tensor_of(alloc_->allocate(tier, n * dtype_bytes(dtype), tag,
                                    zeroed ? Fill::kZero : Fill::kUninitialized),
                   dtype, tier);
}

void CpuBackend::zero(void* data, DType dtype, std::int64_t n, Stream) {
  std::memset(data, 0, static_cast<std::size_t>(n * dtype_bytes(dtype)));
}

void CpuBackend::fill(float* data, float value, std::int64_t n) { std::fill(data, data + n, value); }

double CpuBackend::sum_of_squares(const float* data, std::int64_t n) {
  return cpu::sum_of_squares(data, n);
}

void CpuBackend::adamw(const std::vector<engine::AdamWSpan>& tensors,
                       const engine::AdamWStep& hp, float grad_scale) {
  for (const engine::AdamWSpan& t : tensors) {
    if (t.n == 0) continue;
    if (grad_scale != 1.0f) cpu::scale(t.grad, t.n, grad_scale);
    cpu::adamw_update(t.master, t.grad, t.m, t.v, t.n,
                      cpu::AdamWParams{hp.lr, hp.beta1, hp.beta2, hp.eps,
                                       t.decayed ? hp.weight_decay : 0.0f},
                      hp.step);
    if (t.copy != nullptr && t.copy != t.master) {
      cpu::copy(static_cast<float*>(t.copy), t.master, t.n);
    }
  }
}

bool CpuBackend::init_seeded(float* dst, const UnitLayout& unit, std::uint64_t seed,
                             std::int64_t begin, std::int64_t end) {
  model::init_unit_range(unit, seed, dst, begin, end);
  return true;
}

void CpuBackend::to_compute(void* dst, const float* src, std::int64_t n, Stream) {
  if (dst != src) cpu::copy(static_cast<float*>(dst), src, n);
}

void CpuBackend::copy(void* dst, const void* src, std::int64_t bytes, Stream) {
  std::memcpy(dst, src, static_cast<std::size_t>(bytes));
}

bool host_thread_has_a_core(int hardware_threads, int ranks_on_node, int compute_threads) {
  return hardware_threads / std::max(ranks_on_node, 1) > compute_threads;
}

bool CpuBackend::host_stream_apart() const {
  return host_thread_has_a_core(static_cast<int>(std::thread::hardware_concurrency()),
                                detect_launch_env().local_size, omp_get_max_threads());
}

int CpuBackend::timestamp(Stream stream) {
  const std::lock_guard<std::mutex> lock(stamps_mutex_);
  stamps_.push_back(std::chrono::steady_clock::now());
  const auto mark = stamps_.size() - 1;
  if (stream == Stream::kHost) {
    // Taken when the host stream gets there, as an event recorded on a stream is.
    last_stamp_ticket_ = host_.submit([this, mark] {
      const std::lock_guard<std::mutex> stamping(stamps_mutex_);
      stamps_[mark] = std::chrono::steady_clock::now();
    });
  }
  return static_cast<int>(mark);
}

double CpuBackend::seconds_between(int origin, int mark) {
  const std::lock_guard<std::mutex> lock(stamps_mutex_);
  return std::chrono::duration<double>(stamps_.at(static_cast<std::size_t>(mark)) -
                                       stamps_.at(static_cast<std::size_t>(origin)))
      .count();
}

void CpuBackend::clear_timestamps() {
  // No stamp of the host stream is still to be written; host work queued after the last
  // stamp (the host steps a step carries into the next: engine.h) runs on.
  host_.wait_for(last_stamp_ticket_);
  const std::lock_guard<std::mutex> lock(stamps_mutex_);
  stamps_.clear();
}

engine::BackendMaker cpu_backend_maker() {
  return [](AccountingAllocator& alloc,
            const engine::RankPlace& place) -> std::unique_ptr<engine::Backend> {
    return std::make_unique<CpuBackend>(alloc, *place.host);
  };
}

}  // namespace strata::cpu_backend
