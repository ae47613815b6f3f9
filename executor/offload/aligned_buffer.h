// AlignedBuffer: a move-only owner of host bytes aligned to 4096 (the O_DIRECT rule on
// Linux block devices: buffer address, length and file offset all multiples of the logical
// block size, 4096 on NVMe). Zero-initialised, freed on destruction. On the CUDA backend
// the staging buffers would be pinned (cudaHostRegister); on the CPU backend aligned host
// memory is all O_DIRECT needs. Deliberately not here: accounting (callers reserve() the
// bytes with the AccountingAllocator when the buffer is part of a run), pooling.
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata::offload {

inline constexpr std::int64_t kDirectIoAlignment = 4096;  // bytes

// Rounds bytes up to a multiple of kDirectIoAlignment.
constexpr std::int64_t round_up_to_alignment(std::int64_t bytes) {
  return (bytes + kDirectIoAlignment - 1) / kDirectIoAlignment * kDirectIoAlignment;
}
constexpr bool is_aligned(std::int64_t value) { return value % kDirectIoAlignment == 0; }

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // bytes >= 0; data() holds round_up_to_alignment(bytes) usable bytes, so an odd-sized
  // tensor's padded tail can be transferred. Throws SystemError when allocation fails.
  explicit AlignedBuffer(std::int64_t bytes);
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { reset(); }

  void* data() const { return data_; }
  std::byte* bytes_ptr() const { return static_cast<std::byte*>(data_); }
  float* f32() const { return static_cast<float*>(data_); }
  std::int64_t bytes() const { return bytes_; }
  void reset() noexcept;

 private:
  void* data_ = nullptr;
  std::int64_t bytes_ = 0;
};

}  // namespace strata::offload
