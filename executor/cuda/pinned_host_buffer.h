// PinnedHostBuffer: page-locked host memory (cudaHostAlloc) for fast, asynchronous
// host<->device copies (offloaded optimizer states, pipeline staging), accounted on the
// AccountingAllocator's HOST tier so a GPU run's host peak is measured like the CPU
// backend's. Move-only RAII: cudaFreeHost and the accounting released on destruction.
// Zero-filled like AccountingAllocator's Buffer, unless asked not to be.
// Deliberately not pooled: pinned buffers are few, big and long-lived (allocated at setup),
// and cudaHostAlloc's cost is paid once.
#pragma once

#include <cstdint>
#include <string>

#include "executor/memory/accounting_allocator.h"

namespace strata::cuda {

class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  // Checks the host budget first (OutOfMemory before any CUDA call), then cudaHostAlloc;
  // a failed pinning throws OutOfMemory{"host", bytes, budget free} when the runtime says
  // out of memory, SystemError otherwise; std::invalid_argument for bytes < 0.
  // fill: Fill::kZero zero-fills it (on every thread: an offloaded optimizer state of tens
  // of GiB took seconds on one), Fill::kUninitialized leaves it for a caller that writes it.
  static PinnedHostBuffer allocate(AccountingAllocator& accounting, std::int64_t bytes,
                                   const std::string& tag, Fill fill = Fill::kZero);
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  ~PinnedHostBuffer() { reset(); }

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::int64_t bytes() const { return reservation_.bytes(); }
  void reset() noexcept;

 private:
  PinnedHostBuffer(void* data, Reservation reservation)
      : data_(data), reservation_(std::move(reservation)) {}
  void* data_ = nullptr;
  Reservation reservation_;
};

}  // namespace strata::cuda
