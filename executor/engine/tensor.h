// Tensor: a move-only owner of n elements of one DType on one memory tier, handed out by a
// Backend (executor/engine/backend.h). The engine and the model layers hold every buffer
// as a Tensor, whatever memory is underneath: the accounting allocator's host memory on the
// CPU backend, a DevicePool block or pinned host memory on the CUDA backend. Storage keeps
// that memory alive and gives it back (accounted) when the Tensor goes.
// Deliberately not here: shapes and strides (the layers know their shapes), allocation.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <utility>

#include "executor/memory/accounting_allocator.h"
#include "kernels/dtype.h"

namespace strata::engine {

class Tensor {
 public:
  // Whatever owns the memory; destroying it frees the memory.
  class Storage {
   public:
    virtual ~Storage() = default;
  };

  Tensor() = default;
  Tensor(void* data, std::int64_t n, DType dtype, MemoryTier tier, std::unique_ptr<Storage> storage)
      : data_(data), n_(n), dtype_(dtype), tier_(tier), storage_(std::move(storage)) {}
  // A moved-from Tensor is empty.
  Tensor(Tensor&& other) noexcept { *this = std::move(other); }
  Tensor& operator=(Tensor&& other) noexcept {
    if (this != &other) {
      storage_ = std::move(other.storage_);
      data_ = std::exchange(other.data_, nullptr);
      n_ = std::exchange(other.n_, 0);
      dtype_ = other.dtype_;
      tier_ = other.tier_;
    }
    return *this;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  void* data() const { return data_; }
  std::int64_t size() const { return n_; }  // elements
  std::int64_t bytes() const { return n_ * dtype_bytes(dtype_); }
  DType dtype() const { return dtype_; }
  MemoryTier tier() const { return tier_; }
  bool empty() const { return data_ == nullptr; }

  // Typed views; f32() checks the dtype (a wrong view is a bug, not bad input).
  float* f32() const {
    if (dtype_ != DType::kF32 && data_ != nullptr) throw std::logic_error("Tensor::f32 on a non-f32 tensor");
    return static_cast<float*>(data_);
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  // A pointer `offset` elements in.
  void* at(std::int64_t offset) const {
    return static_cast<char*>(data_) + offset * dtype_bytes(dtype_);
  }

  void reset() {
    storage_.reset();
    data_ = nullptr;
    n_ = 0;
  }

 private:
  void* data_ = nullptr;
  std::int64_t n_ = 0;
  DType dtype_ = DType::kF32;
  MemoryTier tier_ = MemoryTier::kDevice;
  std::unique_ptr<Storage> storage_;
};

}  // namespace strata::engine
