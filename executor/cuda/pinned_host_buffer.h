// PinnedHostBuffer: page-locked host memory for fast, asynchronous host<->device copies
// (offloaded optimizer states, pipeline staging), accounted on the AccountingAllocator's
// HOST tier so a GPU run's host peak is measured like the CPU backend's. Move-only RAII:
// the pinning and the accounting released on destruction. Zero-filled like
// AccountingAllocator's Buffer, unless asked not to be.
// How the pages are pinned, by size:
// - kRegisteredBytes and more: fresh anonymous pages (host_pages.h, transparent huge pages
//   asked for), faulted in on every thread, then cudaHostRegister. cudaHostAlloc faults in
//   and clears every page of a request in the calling thread while it pins: gpt-8b's
//   offloaded state (~16 bytes a parameter) came at ~1.4 GB/s, 90 s without a step on an
//   H200 machine. The cores fault in and clear the pages (the kernel's zero pages: a zeroed
//   buffer needs no fill), and the registration only pins pages that are present, which is
//   what PyTorch's pinned_use_cuda_host_register option does for the same reason.
//   Where the runtime cannot register (cudaErrorNotSupported), cudaHostAlloc as below.
// - smaller: cudaHostAlloc (staging buffers of a few KiB to MiB, where page faults do not
//   show).
// Deliberately not pooled: pinned buffers are few, big and long-lived (allocated at setup),
// and pinning is paid once.
#pragma once

#include <cstdint>
#include <string>

#include "executor/memory/accounting_allocator.h"
#include "executor/memory/host_pages.h"

namespace strata::cuda {

class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  // Checks the host budget first (OutOfMemory before any CUDA call), then pins (above);
  // a failed pinning throws OutOfMemory{"host", bytes, budget free} when the runtime says
  // out of memory, SystemError otherwise; std::invalid_argument for bytes < 0.
  // fill: Fill::kZero zero-fills it (registered pages are zero already; cudaHostAlloc's are
  // filled on every thread), Fill::kUninitialized leaves it for a caller that writes it.
  static PinnedHostBuffer allocate(AccountingAllocator& accounting, std::int64_t bytes,
                                   const std::string& tag, Fill fill = Fill::kZero);
  // Requests of this many bytes or more are registered pages (see above).
  static constexpr std::int64_t kRegisteredBytes = std::int64_t{2} << 20;
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
  // Whether the pages are mapped here and registered (else cudaHostAlloc's).
  bool registered() const { return !pages_.empty(); }
  void reset() noexcept;

 private:
  PinnedHostBuffer(void* data, HostPages pages, Reservation reservation)
      : data_(data), pages_(std::move(pages)), reservation_(std::move(reservation)) {}
  void* data_ = nullptr;
  HostPages pages_;  // registered pages, or empty: data_ is cudaHostAlloc's
  Reservation reservation_;
};

}  // namespace strata::cuda
