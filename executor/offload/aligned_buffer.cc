// AlignedBuffer: posix_memalign-backed, 4096-aligned host bytes (see aligned_buffer.h).
#include "executor/offload/aligned_buffer.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "cost_model/specs/errors.h"

namespace strata::offload {

AlignedBuffer::AlignedBuffer(std::int64_t bytes) {
  if (bytes < 0) {
    throw std::invalid_argument(fmt::format("AlignedBuffer: bytes = {}; expected >= 0", bytes));
  }
  if (bytes == 0) return;
  // Allocate a whole number of alignment units so O_DIRECT may always transfer the padded
  // tail of an odd-sized tensor.
  const std::int64_t padded = round_up_to_alignment(bytes);
  void* p = nullptr;
  const int rc = posix_memalign(&p, static_cast<std::size_t>(kDirectIoAlignment),
                                static_cast<std::size_t>(padded));
  if (rc != 0) {
    throw SystemError(fmt::format("posix_memalign({}, {} bytes) failed: {} (errno {})",
                                  kDirectIoAlignment, padded, std::strerror(rc), rc));
  }
  std::memset(p, 0, static_cast<std::size_t>(padded));
  data_ = p;
  bytes_ = bytes;
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void AlignedBuffer::reset() noexcept {
  std::free(data_);
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace strata::offload
