// The CPU backend's host stream (see host_stream.h).
#include "executor/cpu/host_stream.h"

#include <utility>

namespace strata::cpu_backend {

HostStream::~HostStream() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return completed_ == submitted_; });
    stopping_ = true;
  }
  queued_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int HostStream::submit(std::function<void()> work) {
  int ticket = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(work));
    ticket = ++submitted_;
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  queued_.notify_one();
  return ticket;
}

int HostStream::last_ticket() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return submitted_;
}

void HostStream::wait_for(int ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return completed_ >= ticket; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void HostStream::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing is left
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    const bool skip = error_ != nullptr;  // what came after a failure may depend on it
    lock.unlock();
    std::exception_ptr thrown;
    if (!skip) {
      try {
        work();
      } catch (...) {
        thrown = std::current_exception();
      }
    }
    work = nullptr;  // what it captured goes before it counts as done
    lock.lock();
    if (thrown && !error_) error_ = thrown;
    ++completed_;
    done_.notify_all();
  }
}

}  // namespace strata::cpu_backend
