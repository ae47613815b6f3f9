// Communicator: the collectives and point-to-point messages one group of ranks needs for
// training (TP / DP / PP / embedding groups), behind an interface with an MPI implementation
// for the CPU backend (mpi_communicator.h) and room for an NCCL one for the GPU backend.
//
// Contract shared by every implementation:
// - Counts are elements (not bytes); every rank of the group calls a collective with the same
//   n, in the same order. Buffers belong to the backend's memory: host pointers for MPI,
//   device pointers for NCCL (an NCCL communicator is bound to a stream at construction and
//   enqueues on it; synchronize() waits for what it enqueued; MPI's is a no-op).
// - Sums over float/double are DETERMINISTIC: the result is the rank-ordered sum
//   ((x_0 + x_1) + x_2) + ... + x_{size-1}, bit-identical on every rank and on every rerun,
//   whatever the algorithm underneath (see mpi_communicator.cc for how MPI gets there).
// - Failures throw strata::SystemError naming the call, file, line and the library's text.
// Deliberately not here: dtype-generic collectives, tensors, streams, async collectives.
#pragma once

#include <cstdint>
#include <memory>

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

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // 0..size()-1 within this group
  virtual int size() const = 0;

  // In place: data (n) becomes the element-wise sum / max over the group's ranks.
  virtual void all_reduce_sum(float* data, std::int64_t n) = 0;
  virtual void all_reduce_max(float* data, std::int64_t n) = 0;
  // Scalars and small vectors: losses, norms, token counts.
  virtual void all_reduce_sum(double* data, std::int64_t n) = 0;
  virtual void all_reduce_max(double* data, std::int64_t n) = 0;
  virtual void all_reduce_sum(std::int64_t* data, std::int64_t n) = 0;

  // in: (size, n) rank-major; out: (n) = sum over ranks r of in_r[rank()*n .. rank()*n + n).
  virtual void reduce_scatter_sum(const float* in, float* out, std::int64_t n) = 0;
  // in: (n); out: (size, n) with row r = rank r's in.
  virtual void all_gather(const float* in, float* out, std::int64_t n) = 0;
  // data (n) on every rank becomes root's data.
  virtual void broadcast(float* data, std::int64_t n, int root) = 0;

  // Point-to-point within the group. send() returns at once; the buffer must stay alive and
  // unchanged until the Request completes. recv() blocks until the message has arrived.
  // Messages between one pair of ranks with one tag arrive in the order they were sent.
  virtual Request send(const float* data, std::int64_t n, int peer, int tag) = 0;
  virtual void recv(float* data, std::int64_t n, int peer, int tag) = 0;
  // Non-blocking receive, for overlapping a pipeline receive with compute.
  virtual Request irecv(float* data, std::int64_t n, int peer, int tag) = 0;

  virtual void barrier() = 0;
  // Waits for work enqueued on the backend's stream (NCCL); MPI's calls complete in place.
  virtual void synchronize() {}
};

}  // namespace strata
