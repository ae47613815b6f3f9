// Fresh host pages and their population on every thread (see host_pages.h).
#include "executor/memory/host_pages.h"

#include <fmt/format.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "cost_model/specs/errors.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14's value, for older headers
#endif

namespace strata {
namespace {

// Faults in one thread's part: one madvise where the kernel has MADV_POPULATE_WRITE, else a
// write of each page's first byte (its own value: the contents stay). Returns 0 or an errno.
int populate_part(char* begin, std::int64_t bytes, std::int64_t page) {
  if (bytes <= 0) return 0;
  if (madvise(begin, static_cast<size_t>(bytes), MADV_POPULATE_WRITE) == 0) return 0;
  if (errno != EINVAL) return errno;  // EINVAL: a kernel before 5.14
  for (std::int64_t off = 0; off < bytes; off += page) {
    volatile char* p = begin + off;
    *p = *p;
  }
  return 0;
}

}  // namespace

std::int64_t host_page_bytes() {
  static const std::int64_t page = [] {
    const long size = sysconf(_SC_PAGESIZE);
    return size > 0 ? static_cast<std::int64_t>(size) : std::int64_t{4096};
  }();
  return page;
}

std::int64_t mapped_bytes(std::int64_t bytes) {
  const std::int64_t page = host_page_bytes();
  return (bytes + page - 1) / page * page;
}

void* map_zero_pages(std::int64_t bytes, bool huge) {
  if (bytes <= 0) throw std::invalid_argument(fmt::format("map_zero_pages: {} bytes", bytes));
  const auto size = static_cast<size_t>(mapped_bytes(bytes));
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) {
    throw SystemError(fmt::format("mmap of {} bytes failed: {} (errno {})", size,
                                  std::strerror(errno), errno));
  }
  // Only a hint: without transparent huge pages (disabled, or "never") the mapping is made
  // of small pages, which is correct, only slower to fault in.
  if (huge) (void)madvise(data, size, MADV_HUGEPAGE);
  return data;
}

void unmap_pages(void* data, std::int64_t bytes) noexcept {
  if (data != nullptr) munmap(data, static_cast<size_t>(mapped_bytes(bytes)));
}

void populate_on_every_thread(void* data, std::int64_t bytes) {
  const std::int64_t page = host_page_bytes();
  if (bytes <= 0) return;
  if (reinterpret_cast<std::uintptr_t>(data) % static_cast<std::uintptr_t>(page) != 0 ||
      bytes % page != 0) {
    throw std::invalid_argument(fmt::format("populate_on_every_thread: {} bytes at {}; expected "
                                            "whole pages of {} bytes", bytes, data, page));
  }
  // Parts of whole 2 MiB (a huge page never straddles two threads' parts).
  constexpr std::int64_t kHuge = std::int64_t{2} << 20;
  std::atomic<int> error{0};
#pragma omp parallel
  {
    const int threads = omp_get_num_threads();
    const int t = omp_get_thread_num();
    const std::int64_t per = (bytes / threads + kHuge - 1) / kHuge * kHuge;
    const std::int64_t lo = std::min(bytes, per * t);
    const std::int64_t hi = std::min(bytes, lo + per);
    const int err = populate_part(static_cast<char*>(data) + lo, hi - lo, page);
    if (err != 0) error.store(err);
  }
  if (const int err = error.load(); err != 0) {
    throw SystemError(fmt::format("faulting in {} bytes of host memory failed: {} (errno {})",
                                  bytes, std::strerror(err), err));
  }
}

}  // namespace strata
