// CommWatch: which blocking communication call a rank is in, with which peer, and since when;
// CommWatchdog: a thread that ends the job when one such call waits past a bound
// (`strata run --comm-timeout-s`).
//
// Why: a rank that hangs (stopped, deadlocked, its node gone) used to hang the whole job
// forever while its peers spun a core each inside MPI. MpiCommunicator enters a Scope around
// every call that can block (each collective, MPI_Recv, MPI_Wait, MPI_Comm_split/dup); the
// watchdog polls the record and, past the timeout, hands a message naming the call, the
// peer (or the group) and what each peer is doing to its owner's callback, which ends the
// process (tools/strata/run.cc prints it and exits; mpirun then ends every other rank).
//
// What each peer is doing: with a status directory (the job directory `strata run` makes
// for its ranks), each rank publishes its record in <dir>/rank-<r>.status, a few lock-free
// 64-bit atomics in a shared mapping, so a watchdog can say "rank 3 (pid 4242) is stopped,
// in no communication call for 31.0 s" or "rank 2 is in MPI_Recv from rank 1". Without
// one, the message names only this rank's call and peer.
// Times are CLOCK_MONOTONIC, comparable between processes of one machine. Only the rank's
// main thread enters scopes (MPI_THREAD_FUNNELED); the watchdog thread makes no MPI call.
// Deliberately not here: NCCL calls (they do not block the host thread in the same way).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <condition_variable>
#include <vector>

namespace strata {

// The MPI calls that can block, by the name a message shows.
enum class CommCall : std::int32_t {
  kNone = 0,
  kAlltoall,
  kAlltoallv,
  kAllgather,
  kAllgatherv,
  kAllreduce,
  kBcast,
  kBarrier,
  kRecv,
  kWaitRecv,
  kWaitSend,
  kGather,
  kGatherv,
  kCommSplit,
  kCommDup,
};
const char* to_string(CommCall call);

// Seconds on CLOCK_MONOTONIC.
double monotonic_s();

class CommWatch {
 public:
  // status_dir empty: the record stays in this process. Else <status_dir>/rank-<world_rank>.status
  // is created and mapped (SystemError naming the call on failure), and the records of all
  // world_size ranks are read when a timeout is described.
  explicit CommWatch(int world_rank, int world_size = 1,
                     const std::filesystem::path& status_dir = {});
  CommWatch(const CommWatch&) = delete;
  CommWatch& operator=(const CommWatch&) = delete;
  ~CommWatch();

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  const std::filesystem::path& status_dir() const { return status_dir_; }

  // Entered around one blocking call. peer: a world rank for point-to-point, -1 for a
  // collective over `group` (world ranks, the communicator's; copied only when read).
  class Scope {
   public:
    Scope(CommWatch* watch, CommCall call, int peer, const std::vector<int>* group);
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope();

   private:
    CommWatch* watch_;
  };

  struct Blocked {
    CommCall call = CommCall::kNone;
    int peer = -1;
    std::vector<int> group;
    double waited_s = 0;
  };
  // What this rank waits in now (nullopt: no blocking call), for the watchdog.
  std::optional<Blocked> blocked() const;

  // Another rank's published record, if a status directory is in use and it has one.
  struct PeerStatus {
    long pid = 0;
    CommCall call = CommCall::kNone;
    int peer = -1;
    double for_s = 0;  // in `call` for this long, or (kNone) out of any call for this long
  };
  std::optional<PeerStatus> peer_status(int world_rank) const;

  // Whether this rank is the first of its job to report a timeout (the first to create
  // <status_dir>/timeout.reported); always true without a status directory. Every rank's
  // watchdog fires within moments of the others; one message is enough.
  bool claim_report() const;

  // Whether a rank of the job that used `status_dir` reported a timeout (claim_report): how
  // the launcher tells a job ended by the watchdog from one that failed otherwise, whatever
  // exit status mpirun passes on (that of the first rank reaped).
  static bool timeout_reported(const std::filesystem::path& status_dir);

 private:
  struct Shared;  // the mapped record (comm_watch.cc)
  void enter(CommCall call, int peer, const std::vector<int>* group);
  void leave();

  int world_rank_;
  int world_size_;
  std::filesystem::path status_dir_;
  Shared* shared_ = nullptr;  // mapped when status_dir_ is set
  mutable std::mutex mutex_;
  CommCall call_ = CommCall::kNone;
  int peer_ = -1;
  const std::vector<int>* group_ = nullptr;
  double since_s_ = 0;
};

// The message a watchdog gives for `blocked` (exposed for tests): "rank 0: MPI_Recv from
// rank 3 waited 10.0 s (--comm-timeout-s 10); rank 3 (pid 42) is stopped, in no
// communication call for 10.2 s". It names the peers this call waits for that are not in
// the same call, then any other rank of the job that is stopped, gone, or out of every call
// for longer than the timeout: the likely culprit, when the wait is a chain of victims.
std::string describe_timeout(const CommWatch& watch, const CommWatch::Blocked& blocked,
                             double timeout_s);

// SIGKILL to every other rank of the job that is stopped (SIGSTOP, a debugger's stop), by
// the pids of the status records. A job ended by a timeout must end those too: mpirun's
// kill sequence continues them first, and a continued rank runs on for a moment against
// peers already gone (OpenMPI then prints a line of its own per failed read). Returns how
// many were killed.
int kill_stopped_peers(const CommWatch& watch);

class CommWatchdog {
 public:
  using OnTimeout = std::function<void(const std::string& message)>;
  // Polls `watch` every min(0.1 s, timeout_s / 4); when a call has waited timeout_s, calls
  // on_timeout once (from the watchdog thread) with describe_timeout's message. timeout_s
  // must be finite and > 0 (std::invalid_argument otherwise).
  CommWatchdog(const CommWatch& watch, double timeout_s, OnTimeout on_timeout);
  CommWatchdog(const CommWatchdog&) = delete;
  CommWatchdog& operator=(const CommWatchdog&) = delete;
  ~CommWatchdog();  // stops and joins the thread

 private:
  void loop();
  const CommWatch& watch_;
  double timeout_s_;
  OnTimeout on_timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace strata
