// Communicator: the collectives and point-to-point messages one group of ranks needs for
// training (world / TP / DP / PP / model / embedding groups), typed by kernels/dtype.h's
// DType, behind an interface with three implementations: MpiCommunicator (host buffers, the
// CPU backend), NcclCommunicator (device buffers, one GPU per rank) and
// HostStagedCommunicator (device buffers staged through a host communicator, so several ranks
// can share one GPU).
//
// Contract shared by every implementation:
// - Counts are elements of the given DType (not bytes); every rank of the group calls a
//   collective with the same n and dtype, in the same order. Buffers belong to the backend's
//   memory: host pointers for MPI, device pointers for NCCL and host-staged (those are bound
//   to a stream at construction and enqueue on it; synchronize() waits for what they
//   enqueued; MPI's is a no-op).
// - Which dtype each operation takes:
//     all_reduce_sum, reduce_scatter_sum   kF32, kF64, kBF16, kI64
//     all_reduce_max                       kF32, kF64, kBF16, kI64
//     all_gather, broadcast, send, recv    every DType (they move bytes)
//   Any other combination (or a DType value outside the enum) throws std::invalid_argument
//   before anything is sent, on every rank that makes the call.
// - Sums are DETERMINISTIC, whatever the algorithm underneath:
//     kF32, kF64: the rank-ordered sum ((x_0 + x_1) + x_2) + ... + x_{size-1} in the dtype
//                 itself, bit-identical on every rank, every rerun and every backend;
//     kBF16:      the same rank-ordered sum accumulated in fp32, rounded to bf16 once at the
//                 end (round to nearest even, kernels/bf16.h), never after each addition;
//     kI64:       exact (overflow is the caller's error).
//   A 1-rank group returns its input unchanged. Max is exact in any order. (Bit-identity
//   covers non-NaN results: a NaN sum is NaN everywhere, but GPUs return the canonical NaN
//   where the host propagates the operand's payload.)
// - Failures of the library underneath throw strata::SystemError naming the call, file,
//   line and the library's text.
// The typed calls take void*; the inline overloads below keep the pointer-typed calls
// (all_reduce_sum(float*, n), send(const float*, n, peer, tag), ...) that pick the DType
// from the pointer, so most call sites never spell a DType. The typed calls are not virtual:
// an implementation overrides the protected do_* ones, so that no override hides the
// overloads (the non-virtual interface idiom).
// Deliberately not here: tensors, streams, async collectives, group creation
// (communicator_factory.h).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/dtype.h"

// The overrides of an implementation's transport (Communicator's protected do_* calls), one
// declaration each, for its class body; its .cc defines them.
#define STRATA_COMMUNICATOR_TRANSPORT                                                        \
  void do_all_reduce_sum(void* data, std::int64_t n, DType dtype) override;                  \
  void do_all_reduce_max(void* data, std::int64_t n, DType dtype) override;                  \
  void do_reduce_scatter_sum(const void* in, void* out, std::int64_t n, DType dtype) override; \
  void do_all_gather(const void* in, void* out, std::int64_t n, DType dtype) override;       \
  void do_broadcast(void* data, std::int64_t n, DType dtype, int root) override;             \
  Request do_send(const void* data, std::int64_t n, DType dtype, int peer, int tag) override; \
  void do_recv(void* data, std::int64_t n, DType dtype, int peer, int tag) override;         \
  Request do_irecv(void* data, std::int64_t n, DType dtype, int peer, int tag) override;

namespace strata {

// A pending non-blocking operation. Move-only RAII: wait() completes it (throwing on
// failure); a Request dropped without wait() completes in its destructor (a failure there
// aborts, since destructors cannot throw). A default-constructed Request is already done.
class Request {
 public:
  class Impl {
   public:
    virtual ~Impl() = default;
    virtual void wait() = 0;            // throws SystemError
    virtual void wait_noexcept() noexcept = 0;  // logs and aborts on failure
  };

  Request() = default;
  explicit Request(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  Request(Request&&) noexcept = default;
  Request& operator=(Request&& other) noexcept {
    if (this != &other) {
      finish_noexcept();
      impl_ = std::move(other.impl_);
    }
    return *this;
  }
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request() { finish_noexcept(); }

  void wait() {
    if (impl_) {
      std::unique_ptr<Impl> impl = std::move(impl_);
      impl->wait();
    }
  }
  bool pending() const { return impl_ != nullptr; }

 private:
  void finish_noexcept() noexcept {
    if (impl_) {
      impl_->wait_noexcept();
      impl_.reset();
    }
  }
  std::unique_ptr<Impl> impl_;
};

// The dtype rules above, shared by the implementations so they cannot drift apart.
inline bool is_known_dtype(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF64:
    case DType::kI64:
    case DType::kI32:
      return true;
  }
  return false;
}
// all_reduce_sum, reduce_scatter_sum and all_reduce_max take the same set.
inline bool is_reducible_dtype(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kBF16 || t == DType::kI64;
}
// Throw std::invalid_argument naming who, op and the dtype unless the dtype is allowed:
// require_movable for all_gather / broadcast / p2p, require_reducible for sums and max.
inline void require_movable(DType t, const char* who, const char* op) {
  if (!is_known_dtype(t)) {
    throw std::invalid_argument(std::string(who) + "::" + op + ": unknown dtype value " +
                                std::to_string(static_cast<int>(t)));
  }
}
inline void require_reducible(DType t, const char* who, const char* op) {
  require_movable(t, who, op);
  if (!is_reducible_dtype(t)) {
    throw std::invalid_argument(std::string(who) + "::" + op + " does not take dtype " +
                                std::string(to_string(t)) +
                                " (sums and max take f32, f64, bf16, i64)");
  }
}

namespace detail {
template <class T>
inline constexpr bool kAlwaysFalse = false;
// The DType of a pointer's element type, for the pointer-typed overloads.
template <class T>
constexpr DType pointer_dtype() {
  if constexpr (std::is_same_v<T, float>) return DType::kF32;
  else if constexpr (std::is_same_v<T, double>) return DType::kF64;
  else if constexpr (std::is_same_v<T, std::int64_t>) return DType::kI64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return DType::kI32;
  else if constexpr (std::is_same_v<T, Bf16Bits>) return DType::kBF16;
  else static_assert(kAlwaysFalse<T>, "no DType for this element type");
}
}  // namespace detail

// Element types the pointer-typed overloads accept: reductions take the reducible ones,
// data movement every one with a DType.
template <class T>
concept ReducibleElement = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                           std::is_same_v<T, std::int64_t> || std::is_same_v<T, Bf16Bits>;
template <class T>
concept MovableElement = ReducibleElement<T> || std::is_same_v<T, std::int32_t>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // 0..size()-1 within this group
  virtual int size() const = 0;

  // ---- the typed interface ----

  // In place: data (n) becomes the element-wise sum / max over the group's ranks.
  void all_reduce_sum(void* data, std::int64_t n, DType dtype) {
    do_all_reduce_sum(data, n, dtype);
  }
  void all_reduce_max(void* data, std::int64_t n, DType dtype) {
    do_all_reduce_max(data, n, dtype);
  }
  // in: (size, n) rank-major; out: (n) = sum over ranks r of in_r[rank()*n .. rank()*n + n).
  void reduce_scatter_sum(const void* in, void* out, std::int64_t n, DType dtype) {
    do_reduce_scatter_sum(in, out, n, dtype);
  }
  // in: (n); out: (size, n) with row r = rank r's in.
  void all_gather(const void* in, void* out, std::int64_t n, DType dtype) {
    do_all_gather(in, out, n, dtype);
  }
  // data (n) on every rank becomes root's data.
  void broadcast(void* data, std::int64_t n, DType dtype, int root) {
    do_broadcast(data, n, dtype, root);
  }

  // Point-to-point within the group. send() returns at once; the buffer must stay alive and
  // unchanged until the Request completes. recv() blocks until the message has arrived.
  // Messages between one pair of ranks with one tag arrive in the order they were sent; the
  // receiver names the same n and dtype as the sender.
  Request send(const void* data, std::int64_t n, DType dtype, int peer, int tag) {
    return do_send(data, n, dtype, peer, tag);
  }
  void recv(void* data, std::int64_t n, DType dtype, int peer, int tag) {
    do_recv(data, n, dtype, peer, tag);
  }
  // Non-blocking receive, for overlapping a pipeline receive with compute.
  Request irecv(void* data, std::int64_t n, DType dtype, int peer, int tag) {
    return do_irecv(data, n, dtype, peer, tag);
  }

  virtual void barrier() = 0;
  // Waits for work enqueued on the backend's stream (NCCL, host-staged); MPI's calls
  // complete in place.
  virtual void synchronize() {}

  // ---- pointer-typed overloads: the DType comes from the pointer ----

  // The signatures the interface had before it was typed, kept as plain functions so every
  // call that compiled then resolves as it did (`broadcast(nullptr, 0, root)` included: a
  // template cannot deduce from nullptr). For float they are preferred over the templates.
  void all_reduce_sum(float* data, std::int64_t n) { all_reduce_sum(data, n, DType::kF32); }
  void all_reduce_sum(double* data, std::int64_t n) { all_reduce_sum(data, n, DType::kF64); }
  void all_reduce_sum(std::int64_t* data, std::int64_t n) {
    all_reduce_sum(data, n, DType::kI64);
  }
  void all_reduce_max(float* data, std::int64_t n) { all_reduce_max(data, n, DType::kF32); }
  void all_reduce_max(double* data, std::int64_t n) { all_reduce_max(data, n, DType::kF64); }
  void reduce_scatter_sum(const float* in, float* out, std::int64_t n) {
    reduce_scatter_sum(in, out, n, DType::kF32);
  }
  void all_gather(const float* in, float* out, std::int64_t n) {
    all_gather(in, out, n, DType::kF32);
  }
  void broadcast(float* data, std::int64_t n, int root) { broadcast(data, n, DType::kF32, root); }
  Request send(const float* data, std::int64_t n, int peer, int tag) {
    return send(data, n, DType::kF32, peer, tag);
  }
  void recv(float* data, std::int64_t n, int peer, int tag) {
    recv(data, n, DType::kF32, peer, tag);
  }
  Request irecv(float* data, std::int64_t n, int peer, int tag) {
    return irecv(data, n, DType::kF32, peer, tag);
  }

  // Every other element type with a DType (bf16 as Bf16Bits, i32 for data movement, ...).
  template <ReducibleElement T>
  void all_reduce_sum(T* data, std::int64_t n) {
    all_reduce_sum(static_cast<void*>(data), n, detail::pointer_dtype<T>());
  }
  template <ReducibleElement T>
  void all_reduce_max(T* data, std::int64_t n) {
    all_reduce_max(static_cast<void*>(data), n, detail::pointer_dtype<T>());
  }
  template <ReducibleElement T>
  void reduce_scatter_sum(const T* in, T* out, std::int64_t n) {
    reduce_scatter_sum(static_cast<const void*>(in), static_cast<void*>(out), n,
                       detail::pointer_dtype<T>());
  }
  template <MovableElement T>
  void all_gather(const T* in, T* out, std::int64_t n) {
    all_gather(static_cast<const void*>(in), static_cast<void*>(out), n,
               detail::pointer_dtype<T>());
  }
  template <MovableElement T>
  void broadcast(T* data, std::int64_t n, int root) {
    broadcast(static_cast<void*>(data), n, detail::pointer_dtype<T>(), root);
  }
  template <MovableElement T>
  Request send(const T* data, std::int64_t n, int peer, int tag) {
    return send(static_cast<const void*>(data), n, detail::pointer_dtype<T>(), peer, tag);
  }
  template <MovableElement T>
  void recv(T* data, std::int64_t n, int peer, int tag) {
    recv(static_cast<void*>(data), n, detail::pointer_dtype<T>(), peer, tag);
  }
  template <MovableElement T>
  Request irecv(T* data, std::int64_t n, int peer, int tag) {
    return irecv(static_cast<void*>(data), n, detail::pointer_dtype<T>(), peer, tag);
  }

 protected:
  // What an implementation provides: the typed calls above, one each.
  virtual void do_all_reduce_sum(void* data, std::int64_t n, DType dtype) = 0;
  virtual void do_all_reduce_max(void* data, std::int64_t n, DType dtype) = 0;
  virtual void do_reduce_scatter_sum(const void* in, void* out, std::int64_t n,
                                     DType dtype) = 0;
  virtual void do_all_gather(const void* in, void* out, std::int64_t n, DType dtype) = 0;
  virtual void do_broadcast(void* data, std::int64_t n, DType dtype, int root) = 0;
  virtual Request do_send(const void* data, std::int64_t n, DType dtype, int peer, int tag) = 0;
  virtual void do_recv(void* data, std::int64_t n, DType dtype, int peer, int tag) = 0;
  virtual Request do_irecv(void* data, std::int64_t n, DType dtype, int peer, int tag) = 0;
};

}  // namespace strata
