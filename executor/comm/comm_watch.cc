// CommWatch, its shared status records, and CommWatchdog (see comm_watch.h).
#include "executor/comm/comm_watch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cost_model/specs/errors.h"

namespace strata {

// One rank's record as other processes read it: four lock-free 64-bit atomics (address-free,
// so they work in a mapping shared between processes). A reader may see the fields of two
// moments mixed; the message is a diagnosis, and each field is whole.
struct CommWatch::Shared {
  std::atomic<std::int64_t> pid;
  std::atomic<std::int64_t> call;      // CommCall; kNone between calls
  std::atomic<std::int64_t> peer;
  std::atomic<std::int64_t> since_ns;  // entered `call`, or left the last call
};
static_assert(std::atomic<std::int64_t>::is_always_lock_free);

namespace {

std::filesystem::path status_file(const std::filesystem::path& dir, int rank) {
  return dir / fmt::format("rank-{}.status", rank);
}

std::int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The state letter of /proc/<pid>/stat (R, S, D, T stopped, t traced, Z zombie), or 0 when
// the process is not visible here (gone, or in another PID namespace or node).
char process_state(long pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text;
  if (!in || !std::getline(in, text)) return 0;
  const auto close = text.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos || close + 2 >= text.size()) return 0;
  return text[close + 2];
}

std::string ranks_text(const std::vector<int>& ranks) {
  constexpr std::size_t kShown = 8;
  std::string s;
  for (std::size_t i = 0; i < std::min(ranks.size(), kShown); ++i) {
    s += fmt::format("{}{}", i ? "," : "", ranks[i]);
  }
  if (ranks.size() > kShown) s += fmt::format(",... ({} ranks)", ranks.size());
  return s;
}

std::string target_text(CommCall call, int peer, const std::vector<int>& group) {
  if (peer >= 0) return fmt::format("{} rank {}", call == CommCall::kWaitSend ? "to" : "from", peer);
  return "among ranks " + ranks_text(group);
}

}  // namespace

const char* to_string(CommCall call) {
  switch (call) {
    case CommCall::kNone: return "no call";
    case CommCall::kAlltoall: return "MPI_Alltoall";
    case CommCall::kAlltoallv: return "MPI_Alltoallv";
    case CommCall::kAllgather: return "MPI_Allgather";
    case CommCall::kAllgatherv: return "MPI_Allgatherv";
    case CommCall::kAllreduce: return "MPI_Allreduce";
    case CommCall::kBcast: return "MPI_Bcast";
    case CommCall::kBarrier: return "MPI_Barrier";
    case CommCall::kRecv: return "MPI_Recv";
    case CommCall::kWaitRecv: return "MPI_Wait (receive)";
    case CommCall::kWaitSend: return "MPI_Wait (send)";
    case CommCall::kGather: return "MPI_Gather";
    case CommCall::kGatherv: return "MPI_Gatherv";
    case CommCall::kCommSplit: return "MPI_Comm_split";
    case CommCall::kCommDup: return "MPI_Comm_dup";
  }
  return "an unknown call";
}

double monotonic_s() { return static_cast<double>(monotonic_ns()) * 1e-9; }

CommWatch::CommWatch(int world_rank, int world_size, const std::filesystem::path& status_dir)
    : world_rank_(world_rank), world_size_(world_size), status_dir_(status_dir) {
  if (status_dir_.empty()) return;
  const std::filesystem::path path = status_file(status_dir_, world_rank_);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw SystemError(fmt::format("open('{}') failed: {}", path.string(), std::strerror(errno)));
  }
  if (::ftruncate(fd, sizeof(Shared)) != 0) {
    const int err = errno;
    ::close(fd);
    throw SystemError(fmt::format("ftruncate('{}') failed: {}", path.string(), std::strerror(err)));
  }
  void* map = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (map == MAP_FAILED) {
    throw SystemError(fmt::format("mmap('{}') failed: {}", path.string(), std::strerror(err)));
  }
  shared_ = new (map) Shared{};
  shared_->pid.store(::getpid());
  shared_->call.store(static_cast<std::int64_t>(CommCall::kNone));
  shared_->peer.store(-1);
  shared_->since_ns.store(monotonic_ns());
}

CommWatch::~CommWatch() {
  if (shared_ != nullptr) ::munmap(shared_, sizeof(Shared));  // the job directory goes with the job
}

void CommWatch::enter(CommCall call, int peer, const std::vector<int>* group) {
  const std::int64_t now = monotonic_ns();
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    call_ = call;
    peer_ = peer;
    group_ = group;
    since_s_ = static_cast<double>(now) * 1e-9;
  }
  if (shared_ != nullptr) {
    shared_->peer.store(peer);
    shared_->since_ns.store(now);
    shared_->call.store(static_cast<std::int64_t>(call));
  }
}

void CommWatch::leave() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    call_ = CommCall::kNone;
    group_ = nullptr;
  }
  if (shared_ != nullptr) {
    shared_->call.store(static_cast<std::int64_t>(CommCall::kNone));
    shared_->since_ns.store(monotonic_ns());
  }
}

CommWatch::Scope::Scope(CommWatch* watch, CommCall call, int peer, const std::vector<int>* group)
    : watch_(watch) {
  if (watch_ != nullptr) watch_->enter(call, peer, group);
}

CommWatch::Scope::~Scope() {
  if (watch_ != nullptr) watch_->leave();
}

std::optional<CommWatch::Blocked> CommWatch::blocked() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (call_ == CommCall::kNone) return std::nullopt;
  Blocked b;
  b.call = call_;
  b.peer = peer_;
  if (group_ != nullptr) b.group = *group_;  // copied while the scope (and its communicator) lives
  b.waited_s = monotonic_s() - since_s_;
  return b;
}

std::optional<CommWatch::PeerStatus> CommWatch::peer_status(int world_rank) const {
  if (status_dir_.empty()) return std::nullopt;
  const std::filesystem::path path = status_file(status_dir_, world_rank);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Shared))) {
    ::close(fd);
    return std::nullopt;
  }
  void* map = ::mmap(nullptr, sizeof(Shared), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return std::nullopt;
  const auto* s = static_cast<const Shared*>(map);
  PeerStatus p;
  p.pid = static_cast<long>(s->pid.load());
  p.call = static_cast<CommCall>(s->call.load());
  p.peer = static_cast<int>(s->peer.load());
  p.for_s = static_cast<double>(monotonic_ns() - s->since_ns.load()) * 1e-9;
  ::munmap(map, sizeof(Shared));
  return p;
}

bool CommWatch::claim_report() const {
  if (status_dir_.empty()) return true;
  const std::filesystem::path token = status_dir_ / "timeout.reported";
  const int fd = ::open(token.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno != EEXIST;  // another rank was first (or the directory is gone)
  ::close(fd);
  return true;
}

bool CommWatch::timeout_reported(const std::filesystem::path& status_dir) {
  std::error_code ec;
  return std::filesystem::exists(status_dir / "timeout.reported", ec);
}

int kill_stopped_peers(const CommWatch& watch) {
  int killed = 0;
  for (int r = 0; r < watch.world_size(); ++r) {
    if (r == watch.world_rank()) continue;
    const std::optional<CommWatch::PeerStatus> p = watch.peer_status(r);
    if (!p || p->pid <= 0) continue;
    const char state = process_state(p->pid);
    if ((state == 'T' || state == 't') && ::kill(static_cast<pid_t>(p->pid), SIGKILL) == 0) ++killed;
  }
  return killed;
}

std::string describe_timeout(const CommWatch& watch, const CommWatch::Blocked& blocked,
                             double timeout_s) {
  std::string m = fmt::format("rank {}: {} {} waited {:.1f} s (--comm-timeout-s {:g})",
                              watch.world_rank(), to_string(blocked.call),
                              target_text(blocked.call, blocked.peer, blocked.group),
                              blocked.waited_s, timeout_s);
  std::vector<int> peers;
  if (blocked.peer >= 0) {
    peers.push_back(blocked.peer);
  } else {
    for (int r : blocked.group) {
      if (r != watch.world_rank()) peers.push_back(r);
    }
  }
  // One rank's state in words: "rank 7 (pid 42) is stopped, in MPI_Recv from rank 3 for 5.0 s".
  const auto rank_text = [](int r, const CommWatch::PeerStatus& p, char state) {
    const std::string how = state == 'T' || state == 't' ? "is stopped, "
                            : state == 'Z'               ? "has exited, "
                            : state == 0                 ? "is not visible from here, "
                                                         : "is ";
    if (p.call == CommCall::kNone) {
      return fmt::format("rank {} (pid {}) {}in no communication call for {:.1f} s", r, p.pid,
                         how, p.for_s);
    }
    const std::string target =
        p.peer >= 0 ? fmt::format(" {}", target_text(p.call, p.peer, {})) : std::string();
    return fmt::format("rank {} (pid {}) {}in {}{} for {:.1f} s", r, p.pid, how,
                       to_string(p.call), target, p.for_s);
  };
  constexpr std::size_t kShown = 8;
  std::vector<bool> named(static_cast<std::size_t>(std::max(watch.world_size(), 1)), false);
  std::size_t shown = 0, waiting_too = 0, unknown = 0;
  for (int r : peers) {
    const std::optional<CommWatch::PeerStatus> p = watch.peer_status(r);
    if (!p) {
      ++unknown;
      continue;
    }
    // A running peer in the same collective is a victim too; the culprits are the others.
    const char state = process_state(p->pid);
    const bool stopped = state == 'T' || state == 't' || state == 'Z';
    if (blocked.peer < 0 && p->call == blocked.call && !stopped) {
      ++waiting_too;
      continue;
    }
    if (shown++ == kShown) break;
    if (r >= 0 && r < watch.world_size()) named[static_cast<std::size_t>(r)] = true;
    m += "; " + rank_text(r, *p, state);
  }
  if (waiting_too > 0) m += fmt::format("; {} peer(s) wait in the same call", waiting_too);
  if (unknown > 0 && !watch.status_dir().empty()) {
    m += fmt::format("; {} peer(s) published no status", unknown);
  }
  // The rest of the job: a rank stopped, gone, or out of every call for the whole timeout
  // is where a chain of waits ends.
  std::vector<std::string> suspects;
  for (int r = 0; r < watch.world_size() && suspects.size() < kShown; ++r) {
    if (r == watch.world_rank() || named[static_cast<std::size_t>(r)]) continue;
    const std::optional<CommWatch::PeerStatus> p = watch.peer_status(r);
    if (!p) continue;
    const char state = process_state(p->pid);
    const bool suspect = state == 'T' || state == 't' || state == 'Z' || state == 0 ||
                         (p->call == CommCall::kNone && p->for_s >= timeout_s);
    if (suspect) suspects.push_back(rank_text(r, *p, state));
  }
  if (!suspects.empty()) m += fmt::format("; elsewhere: {}", fmt::join(suspects, "; "));
  return m;
}

CommWatchdog::CommWatchdog(const CommWatch& watch, double timeout_s, OnTimeout on_timeout)
    : watch_(watch), timeout_s_(timeout_s), on_timeout_(std::move(on_timeout)) {
  if (!std::isfinite(timeout_s) || !(timeout_s > 0)) {
    throw std::invalid_argument(fmt::format("CommWatchdog: timeout {} s, expected finite and > 0",
                                            timeout_s));
  }
  thread_ = std::thread([this] { loop(); });
}

CommWatchdog::~CommWatchdog() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void CommWatchdog::loop() {
  const auto period = std::chrono::duration<double>(std::min(0.1, timeout_s_ / 4));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, period);
    if (stop_) return;
    const std::optional<CommWatch::Blocked> b = watch_.blocked();
    if (b && b->waited_s >= timeout_s_) {
      lock.unlock();
      on_timeout_(describe_timeout(watch_, *b, timeout_s_));
      return;  // once: the callback ends the process (tests let it return)
    }
  }
}

}  // namespace strata
