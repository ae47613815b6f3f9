// Fresh anonymous host pages for large, long-lived buffers, and faulting them in on every
// thread. A page's first touch costs a fault and a clear of the page by the kernel, in
// the thread that touches it: tens of GiB touched by one thread (cudaHostAlloc pins its
// pages so, in the calling thread) are seconds to minutes of set-up, the same pages
// touched by every core a fraction of that.
// - map_zero_pages (HostPages owns one): an anonymous private mapping, zero until written
//   (the kernel's zero pages: no fill needed). huge: asks for transparent huge pages
//   (MADV_HUGEPAGE), which are faulted and cleared 2 MiB at a time.
// - populate_on_every_thread: faults a mapping in on the OpenMP team, each thread its own
//   contiguous part, by MADV_POPULATE_WRITE (Linux 5.14; one call a part, no trap a page),
//   or by a write to every page on older kernels. The contents stay what they were.
// Deliberately not here: pinning (executor/cuda/pinned_host_buffer.h registers populated
// pages with CUDA), reuse (host_arena.h), accounting.
#pragma once

#include <cstdint>
#include <utility>

namespace strata {

// The page size mappings are made of (4096 on x86-64 Linux).
std::int64_t host_page_bytes();

// A mapping of bytes rounded up to whole pages (bytes > 0; mapped_bytes() gives the size
// to unmap). Throws SystemError naming the size and errno text when mmap fails.
void* map_zero_pages(std::int64_t bytes, bool huge);
std::int64_t mapped_bytes(std::int64_t bytes);
// Unmaps a mapping of map_zero_pages(bytes, ...) (noexcept: a failure leaks it).
void unmap_pages(void* data, std::int64_t bytes) noexcept;

// Faults [data, data + bytes) in (data page-aligned, bytes a multiple of the page size) on
// every thread of the OpenMP team. Throws SystemError naming the size and errno text when
// the kernel cannot provide the pages (ENOMEM), after every thread has stopped.
void populate_on_every_thread(void* data, std::int64_t bytes);

// A move-only owner of one map_zero_pages mapping, unmapped on destruction.
class HostPages {
 public:
  HostPages() = default;
  HostPages(std::int64_t bytes, bool huge) : data_(map_zero_pages(bytes, huge)), bytes_(bytes) {}
  HostPages(HostPages&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  HostPages& operator=(HostPages&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  HostPages(const HostPages&) = delete;
  HostPages& operator=(const HostPages&) = delete;
  ~HostPages() { reset(); }

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  bool empty() const { return data_ == nullptr; }
  std::int64_t bytes() const { return bytes_; }                // as asked
  std::int64_t mapped() const { return mapped_bytes(bytes_); }  // whole pages
  void reset() noexcept {
    unmap_pages(std::exchange(data_, nullptr), bytes_);
    bytes_ = 0;
  }

 private:
  void* data_ = nullptr;
  std::int64_t bytes_ = 0;
};

}  // namespace strata
