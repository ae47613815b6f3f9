// CUDA's stream semantics for one CPU rank (see stream_scheduler.h).
#include "executor/cpu/cuda_semantics/stream_scheduler.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace strata::cuda_semantics {
namespace {

constexpr int kHost = kSimStreams - 1;

// Keeps the running-op count right when an op throws.
class Running {
 public:
  explicit Running(int& count) : count_(&count) { ++*count_; }
  ~Running() { --*count_; }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;

 private:
  int* count_;
};

// What a freed block holds until its next owner writes it: NaN in every float, so a kernel
// that reads it before (or without) an ordering edge poisons the loss.
void poison(void* data, std::int64_t bytes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto* f = static_cast<float*>(data);
  const std::int64_t floats = bytes / static_cast<std::int64_t>(sizeof(float));
  for (std::int64_t i = 0; i < floats; ++i) f[i] = nan;
  std::memset(static_cast<char*>(data) + floats * 4, 0xff,
              static_cast<std::size_t>(bytes - floats * 4));
}

}  // namespace

void StreamScheduler::refuse_in_host_function(const std::string& what) const {
  if (in_host_function()) {
    throw StreamRace("cuda semantics: host work on the host-function stream made a CUDA call (" +
                     what + "), which a CUDA host function may not");
  }
}

void StreamScheduler::refuse_in_capture(const std::string& what) const {
  if (capturing_) {
    throw StreamRace("cuda semantics: " + what + " during stream capture, which CUDA does not "
                     "allow (cudaErrorStreamCaptureUnsupported): a captured step may make no "
                     "host round trip");
  }
}

void StreamScheduler::begin_capture() {
  if (capturing_) throw std::logic_error("cuda semantics: begin_capture while capturing");
  // Work queued before the capture comes before the graph on its stream: run it now (an
  // order CUDA allows), so that the graph holds only what is captured.
  while (!idle()) {
    for (int s = 0; s < kHost; ++s) flush(static_cast<SimStream>(s), queues_[s].issued);
  }
  throw_pending();
  for (int s = 0; s < kSimStreams; ++s) {
    capture_base_[static_cast<std::size_t>(s)] = queues_[s].issued;
    capture_clocks_[static_cast<std::size_t>(s)] = clocks_[s];
  }
  graph_ = {};
  has_graph_ = false;
  capturing_ = true;
}

void StreamScheduler::end_capture() {
  if (!capturing_) throw std::logic_error("cuda semantics: end_capture without begin_capture");
  capturing_ = false;
  graph_stamps_ = static_cast<int>(stamps_.size());
  for (int s = 0; s < kSimStreams; ++s) {
    Queue& q = queues_[s];
    std::vector<Entry>& recorded = graph_[static_cast<std::size_t>(s)];
    for (Entry& e : q.pending) {
      if (e.kind == Entry::Kind::kWait) {
        const std::int64_t base = capture_base_[static_cast<std::size_t>(index_of(e.target))];
        e.target_position = std::max<std::int64_t>(0, e.target_position - base);
      }
      recorded.push_back(std::move(e));
    }
    q.pending.clear();
    // Nothing recorded has run: the streams are where the capture found them.
    q.issued = capture_base_[static_cast<std::size_t>(s)];
    q.executed = q.issued;
    clocks_[s] = capture_clocks_[static_cast<std::size_t>(s)];
  }
  has_graph_ = true;
  throw_pending();
}

void StreamScheduler::launch() {
  if (!has_graph_) throw std::logic_error("cuda semantics: launch without a captured graph");
  refuse_in_host_function("a graph launch");
  refuse_in_capture("a graph launch");
  throw_pending();
  // The graph's timestamps are written afresh by this run.
  if (stamps_.size() < static_cast<std::size_t>(graph_stamps_)) {
    stamps_.resize(static_cast<std::size_t>(graph_stamps_));
    stamped_.resize(static_cast<std::size_t>(graph_stamps_));
  }
  for (int i = 0; i < graph_stamps_; ++i) stamped_[static_cast<std::size_t>(i)] = false;
  std::array<std::int64_t, kSimStreams> base{};
  for (int s = 0; s < kSimStreams; ++s) base[static_cast<std::size_t>(s)] = queues_[s].issued;
  for (int s = 0; s < kSimStreams; ++s) {
    const auto stream = static_cast<SimStream>(s);
    join(clocks_[s], clocks_[kHost]);  // a launch comes after what the host has seen complete
    for (const Entry& recorded : graph_[static_cast<std::size_t>(s)]) {
      Entry e = recorded;
      if (e.kind == Entry::Kind::kWait && e.target_position > 0) {
        e.target_position += base[static_cast<std::size_t>(index_of(e.target))];
      }
      push_op(stream, std::move(e));
    }
  }
}

void StreamScheduler::throw_pending() {
  if (!pending_race_.empty()) {
    const std::string message = std::move(pending_race_);
    pending_race_.clear();
    throw StreamRace(message);
  }
}

std::int64_t StreamScheduler::push_op(SimStream stream, Entry entry) {
  const int s = index_of(stream);
  Queue& q = queues_[s];
  const std::int64_t position = ++q.issued;
  clocks_[s][s] = position;
  q.pending.push_back(std::move(entry));
  return position;
}

std::int64_t StreamScheduler::enqueue(SimStream stream, const std::string& op,
                                      const std::vector<Access>& accesses,
                                      std::function<void()> run) {
  refuse_in_host_function(op);
  if (running()) {  // issued by the running op itself: part of it
    run();
    return 0;
  }
  throw_pending();
  const int s = index_of(stream);
  // A launch comes after everything the host has seen complete.
  join(clocks_[s], clocks_[kHost]);
  Entry entry;
  entry.run = std::move(run);
  entry.op = op;
  const std::int64_t position = push_op(stream, std::move(entry));
  if (auto race = checker_.access(stream, position, clocks_[s], op, accesses)) {
    throw StreamRace(*race);
  }
  return position;
}

void StreamScheduler::run_now(SimStream stream, const std::string& op,
                              const std::vector<Access>& accesses,
                              const std::function<void()>& run) {
  refuse_in_host_function(op);
  if (running()) {
    run();
    return;
  }
  const std::int64_t position = enqueue(stream, op, accesses, run);
  // Captured: a graph node like any other (NCCL's collectives are captured so), run at launch.
  if (capturing_) return;
  flush(stream, position);
}

void StreamScheduler::enqueue_free(void* data, std::int64_t bytes, const std::string& tag) noexcept {
  if (in_host_function() && pending_race_.empty()) {
    pending_race_ = "cuda semantics: host work on the host-function stream freed device block '" +
                    tag + "', a CUDA call a CUDA host function may not make";
  }
  const int c = index_of(SimStream::kCompute);
  join(clocks_[c], clocks_[kHost]);
  Entry entry;
  entry.run = [data, bytes] { poison(data, bytes); };
  entry.op = "free of '" + tag + "'";
  const std::int64_t position = push_op(SimStream::kCompute, std::move(entry));
  auto race = checker_.access(SimStream::kCompute, position, clocks_[c], "free of '" + tag + "'",
                              {Access{data, bytes, true}});
  if (race && pending_race_.empty()) pending_race_ = std::move(*race);
}

void StreamScheduler::host_op(const std::string& op, const std::vector<Access>& accesses,
                              const std::function<void()>& run) {
  if (in_host_function()) {  // declared when the host function was queued
    run();
    return;
  }
  refuse_in_capture("host work (" + op + ")");
  throw_pending();
  Queue& q = queues_[kHost];
  const std::int64_t position = ++q.issued;
  clocks_[kHost][kHost] = position;
  if (auto race = checker_.access(SimStream::kHost, position, clocks_[kHost], op, accesses)) {
    throw StreamRace(*race);
  }
  run();
}

void StreamScheduler::host_free(const void* data, std::int64_t bytes, const std::string& tag) noexcept {
  if (in_host_function() && pending_race_.empty()) {
    pending_race_ = "cuda semantics: host work on the host-function stream freed pinned block '" +
                    tag + "', a CUDA call a CUDA host function may not make";
  }
  if (capturing_ && pending_race_.empty()) {
    pending_race_ = "cuda semantics: pinned host block '" + tag + "' freed during stream capture, "
                    "which CUDA does not allow (cudaFreeHost synchronizes the device)";
  }
  Queue& q = queues_[kHost];
  const std::int64_t position = ++q.issued;
  clocks_[kHost][kHost] = position;
  auto race = checker_.access(SimStream::kHost, position, clocks_[kHost], "free of '" + tag + "'",
                              {Access{data, bytes, true}});
  if (race && pending_race_.empty()) pending_race_ = std::move(*race);
}

StreamScheduler::Mark StreamScheduler::record(SimStream stream) const {
  const int s = index_of(stream);
  return Mark{stream, queues_[s].issued, clocks_[s]};
}

void StreamScheduler::wait(SimStream waiter, const Mark& mark) {
  refuse_in_host_function("a stream wait");
  throw_pending();
  const int w = index_of(waiter);
  join(clocks_[w], mark.clock);
  Entry entry;
  entry.kind = Entry::Kind::kWait;
  entry.target = mark.stream;
  entry.target_position = mark.position;
  push_op(waiter, std::move(entry));
}

void StreamScheduler::flush(SimStream stream, std::int64_t position) {
  Queue& q = queues_[index_of(stream)];
  while (q.executed < position && !q.pending.empty()) {
    Entry e = std::move(q.pending.front());
    q.pending.pop_front();
    ++q.executed;
    switch (e.kind) {
      case Entry::Kind::kOp: {
        const Running guard(running_);
        const SimStream outer = running_stream_;
        running_stream_ = stream;
        try {
          e.run();
        } catch (...) {
          running_stream_ = outer;
          throw;
        }
        running_stream_ = outer;
        break;
      }
      case Entry::Kind::kWait: flush(e.target, e.target_position); break;
      case Entry::Kind::kStamp:
        if (static_cast<std::size_t>(e.stamp) >= stamps_.size()) break;  // cleared meanwhile
        stamps_[static_cast<std::size_t>(e.stamp)] = std::chrono::steady_clock::now();
        stamped_[static_cast<std::size_t>(e.stamp)] = true;
        break;
    }
  }
}

void StreamScheduler::host_wait(SimStream stream) {
  refuse_in_host_function("a host wait for the " + to_string(stream) + " stream");
  refuse_in_capture("a host wait for the " + to_string(stream) + " stream");
  throw_pending();
  const int s = index_of(stream);
  flush(stream, queues_[s].issued);
  join(clocks_[kHost], clocks_[s]);
}

void StreamScheduler::host_wait(const Mark& mark) {
  refuse_in_host_function("a host wait for a mark of the " + to_string(mark.stream) + " stream");
  refuse_in_capture("a host wait for a mark of the " + to_string(mark.stream) + " stream");
  throw_pending();
  flush(mark.stream, mark.position);
  join(clocks_[kHost], mark.clock);
}

void StreamScheduler::synchronize() {
  refuse_in_host_function("a synchronize");
  refuse_in_capture("a synchronize");
  throw_pending();
  // A flush may queue frees (an op dropping a tensor): go round until nothing is left.
  while (!idle()) {
    for (int s = 0; s < kHost; ++s) flush(static_cast<SimStream>(s), queues_[s].issued);
  }
  for (int s = 0; s < kHost; ++s) join(clocks_[kHost], clocks_[s]);
  throw_pending();
}

bool StreamScheduler::idle() const {
  for (const Queue& q : queues_) {
    if (!q.pending.empty()) return false;
  }
  return true;
}

int StreamScheduler::timestamp(SimStream stream) {
  Entry entry;
  entry.kind = Entry::Kind::kStamp;
  entry.stamp = static_cast<int>(stamps_.size());
  stamps_.emplace_back();
  stamped_.push_back(false);
  push_op(stream, std::move(entry));
  return static_cast<int>(stamps_.size()) - 1;
}

double StreamScheduler::seconds_between(int origin, int mark) const {
  const auto o = static_cast<std::size_t>(origin);
  const auto m = static_cast<std::size_t>(mark);
  if (o >= stamps_.size() || m >= stamps_.size() || !stamped_[o] || !stamped_[m]) {
    throw std::logic_error("cuda semantics: a timestamp read before its stream ran it");
  }
  return std::chrono::duration<double>(stamps_[m] - stamps_[o]).count();
}

}  // namespace strata::cuda_semantics
