// HostStream: the CPU backend's host stream (backend.h, run_on_host_stream): one thread that
// runs host work in the order it was queued, beside the thread that queues it, with a ticket
// per piece of work to wait for. What the CUDA backend's host stream would be if its host
// work did not hold up the issue of the device's: the CPU optimizer of one layer runs while
// the backward of the layers below goes on (program.h, "optimizer").
// - Tickets count the work queued so far (1, 2, ...); waiting for one waits for it and all
//   work before it. Work runs in queue order, one piece at a time.
// - An exception thrown by a piece of work is kept: the work queued after it is skipped
//   (it may depend on what failed), and the next wait throws it, once.
// - The thread starts with the first piece of work (a backend that never runs host work has
//   none) and is joined by the destructor after the queue is done.
// Deliberately not here: what work may run apart (the engine decides; the NVMe store's one
// io_uring engine belongs to the issuing thread), marks of other streams.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace strata::cpu_backend {

class HostStream {
 public:
  HostStream() = default;
  ~HostStream();
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  // Queues `work`; returns its ticket.
  int submit(std::function<void()> work);
  // The ticket of the last work queued; 0 before any.
  int last_ticket() const;
  // Returns once the work of `ticket` (and all before it) is done; throws what a piece of work
  // threw. Tickets <= 0 return at once.
  void wait_for(int ticket);
  void drain() { wait_for(last_ticket()); }

 private:
  void loop();

  mutable std::mutex mutex_;
  std::condition_variable queued_, done_;
  std::deque<std::function<void()>> queue_;
  int submitted_ = 0, completed_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace strata::cpu_backend
