// StreamScheduler: CUDA's stream semantics for one rank of the CPU backend, so that the
// ordering bugs a GPU shows (and the CPU backend's run-to-completion calls hide) show up on
// any machine, deterministically.
//
// - Device work is queued on its stream and runs only when something needs it: a host wait
//   on its stream (host_wait, synchronize), or an op that must run now (a communicator's:
//   flush_through) whose stream waits for it. That is the latest order CUDA allows, and an
//   adversarial one: a kernel reads its inputs as late as it may, after everything the host
//   issued meanwhile on other streams (received messages, reused blocks) has landed.
// - wait(waiter, mark) orders waiter's later work after the mark, as cudaStreamWaitEvent;
//   record(stream) makes a mark, as cudaEventRecord.
// - Communicators' ops run at once (flush_through), after what their stream waits for: like
//   DMA, they write what they receive before anything queued on other streams runs. All
//   cross-rank communication thus happens in the host's issue order on every rank, as on the
//   plain CPU backend, so this mode cannot deadlock where that one does not.
// - The host is an actor with its own program order (SimStream::kHost): host_op runs host
//   work on host memory at once (the CPU optimizer, accumulating offloaded gradients, NVMe
//   reads and writes) and checks what it touches against the copies the host has not waited
//   for; a host wait for a stream or a mark joins what the host knows.
// - Host functions (SimStream::kHostFunctions: the CUDA backend's host stream) are queued
//   and run as any stream's work, their host memory touches declared when queued. CUDA lets
//   a host function make no CUDA call: one that queues, waits for or records device work
//   is a StreamRace naming it (its own on_host declarations run as part of it).
// - Stream capture (CUDA graphs): between begin_capture and end_capture the streams' work is
//   recorded, not run; the host may not wait for any of it, run host work or free pinned
//   memory (a StreamRace names the call, as CUDA fails it: cudaErrorStreamCaptureUnsupported),
//   and communicators' ops are recorded as any stream's. launch() queues the recorded work
//   again in its recorded order, each wait moved to the launch's positions: a replay runs the
//   same closures (the same pointers and arguments) as a graph does.
// - Every op declares what it reads and writes; the RaceChecker (race_checker.h) checks each
//   against the vector clocks of the happens-before order at issue, so a race is reported
//   whether or not this execution order happens to expose it. The first race is thrown as a
//   StreamRace from the next call that can throw (a free, in a destructor, cannot).
// One thread drives it (the rank's).
// Deliberately not here: what a kernel computes (the wrapped CPU backend), memory pools.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "executor/cpu/cuda_semantics/race_checker.h"
#include "executor/cpu/cuda_semantics/sim_streams.h"

namespace strata::cuda_semantics {

class StreamRace : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

class StreamScheduler {
 public:
  struct Mark {
    SimStream stream = SimStream::kCompute;
    std::int64_t position = 0;
    Clock clock{};
  };

  RaceChecker& checker() { return checker_; }

  // Queues `run` on `stream` (lazy); returns its position. While an op is running, ops it
  // issues itself (a kernel's own collective) run inline as part of it.
  std::int64_t enqueue(SimStream stream, const std::string& op, const std::vector<Access>& accesses,
                       std::function<void()> run);
  // Queues and runs through it at once (communicators).
  void run_now(SimStream stream, const std::string& op, const std::vector<Access>& accesses,
               const std::function<void()>& run);
  // Queues a free of a block on the compute stream: NaN over its bytes, in compute order.
  // Never throws (destructors call it): a race it finds is thrown by the next call.
  void enqueue_free(void* data, std::int64_t bytes, const std::string& tag) noexcept;
  // Host work, next in the host's program order: `accesses` checked, then `run` at once.
  // Streams' work it issues itself is queued as any other.
  void host_op(const std::string& op, const std::vector<Access>& accesses,
               const std::function<void()>& run);
  // The host lets go of a pinned host block (its allocator may hand it out again at once): a
  // host write of all of it. Never throws, as enqueue_free.
  void host_free(const void* data, std::int64_t bytes, const std::string& tag) noexcept;

  Mark record(SimStream stream) const;
  void wait(SimStream waiter, const Mark& mark);
  void host_wait(SimStream stream);  // the host waits for everything issued on `stream`
  void host_wait(const Mark& mark);  // ... for the work issued on the mark's stream before it
  void synchronize();                // ... on every stream
  bool idle() const;                 // nothing queued anywhere

  // A timestamp op on `stream`: its time is taken when it runs.
  int timestamp(SimStream stream);
  double seconds_between(int origin, int mark) const;
  void clear_timestamps() {
    stamps_.clear();
    stamped_.clear();
  }

  // Stream capture (see the top of this file). begin_capture first runs what is queued (it
  // comes before the graph on its stream). A wait recorded in the capture for work issued
  // before it is satisfied at every launch (that work is done) and is dropped.
  void begin_capture();
  void end_capture();
  void launch();
  void drop_graph() { graph_ = {}; has_graph_ = false; }
  bool capturing() const { return capturing_; }
  bool has_graph() const { return has_graph_; }

  bool running() const { return running_ > 0; }
  // Inside a host function's run (host work on SimStream::kHostFunctions).
  bool in_host_function() const { return running() && running_stream_ == SimStream::kHostFunctions; }
  void throw_pending();

 private:
  struct Entry {
    enum class Kind { kOp, kWait, kStamp } kind = Kind::kOp;
    std::function<void()> run;          // kOp
    std::string op;                     // kOp: what it is, for messages
    SimStream target = SimStream::kCompute;  // kWait
    std::int64_t target_position = 0;   // kWait
    int stamp = -1;                     // kStamp
  };
  struct Queue {
    std::deque<Entry> pending;
    std::int64_t issued = 0;   // positions handed out (ops and marks' waits do not count)
    std::int64_t executed = 0; // ops run
  };
  std::int64_t push_op(SimStream stream, Entry entry);
  // Throws StreamRace when stream capture is under way: `what` is not allowed then.
  void refuse_in_capture(const std::string& what) const;
  void flush(SimStream stream, std::int64_t position);

  Queue queues_[kSimStreams];
  Clock clocks_[kSimStreams] = {};
  RaceChecker checker_;
  std::vector<std::chrono::steady_clock::time_point> stamps_;
  std::vector<bool> stamped_;
  int running_ = 0;
  SimStream running_stream_ = SimStream::kCompute;  // the stream of the op running
  // Throws StreamRace when a host function makes a backend call (`what`).
  void refuse_in_host_function(const std::string& what) const;
  std::string pending_race_;
  // Stream capture: the positions each stream had at begin_capture, the clocks then, and the
  // graph (per stream, in order; waits' positions relative to the target's capture start,
  // 0 for work before it).
  bool capturing_ = false;
  bool has_graph_ = false;
  std::array<std::int64_t, kSimStreams> capture_base_{};
  std::array<Clock, kSimStreams> capture_clocks_{};
  std::array<std::vector<Entry>, kSimStreams> graph_;
  int graph_stamps_ = 0;  // stamps the graph writes: [0, graph_stamps_)
};

}  // namespace strata::cuda_semantics
