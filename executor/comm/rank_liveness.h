// Which rank of a job ended first, told to the launching `strata run` over a TCP connection
// of each rank's own: the one way to name the node a failed job lost. mpirun's own message
// names it only sometimes (a daemon killed at the moment it starts a rank gives "unable to
// reliably start one or more daemons", no node), and the ranks are killed by mpirun before
// they can say anything.
//
// Each rank connects to the launcher at start and sends "RANK HOST\n"; "done CODE\n" when it
// has finished its run (trained, or stopped by a signal as asked) and will exit with CODE.
// The kernel closes the connection when the process ends, however it ends, so the launcher
// sees, in order, the ranks that ended without "done": the first is where the job broke;
// and when mpirun itself dies after every rank said "done 0" (Open MPI 4.1.4's mpirun
// segfaults now and then at the end of a job), that the run is complete. Best effort: a rank
// that cannot connect runs on without (the job is never worse off than without it).
// Deliberately not here: a node that stops answering without closing anything (its
// connections stay open): the ranks' watchdog ends that job (comm_watch.h).
#pragma once

#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace strata {

class LivenessListener {
 public:
  // Listens on every interface, a port the kernel picks. SystemError naming the call.
  LivenessListener();
  LivenessListener(const LivenessListener&) = delete;
  LivenessListener& operator=(const LivenessListener&) = delete;
  ~LivenessListener();  // stops the thread, closes every connection

  // "HOST:PORT" for the ranks: this machine's host name.
  std::string address() const;

  struct Ended {
    int rank = -1;
    std::string host;
    double at_s = 0;     // seconds since the listener started
    int exit_code = -1;  // the code a finished rank said it exits with (-1: unfinished)
  };
  // The ranks whose connection closed without "done", in the order they closed.
  std::vector<Ended> unfinished() const;
  // The ranks whose connection closed after "done", in the order they closed.
  std::vector<Ended> finished() const;
  // Whether ranks 0..ranks-1 each said "done 0" and closed: the job completed, whatever
  // mpirun's own exit says.
  bool all_finished_cleanly(int ranks) const;
  // The ranks whose connection is still open, by rank: after the job, those on a node that
  // stopped answering (its processes' ends never reached here).
  std::vector<Ended> still_connected() const;

 private:
  void loop();
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: the destructor wakes the poll
  int port_ = 0;
  double started_s_ = 0;
  mutable std::mutex mutex_;
  std::vector<Ended> unfinished_;
  std::vector<Ended> finished_;
  std::vector<Ended> connected_;  // rebuilt by the thread after each change
  std::thread thread_;
};

class LivenessBeacon {
 public:
  // Connects to `address` (LivenessListener::address) and says rank and host; on any
  // failure it stays silent (best effort, above).
  LivenessBeacon(const std::string& address, int rank, const std::string& host);
  LivenessBeacon(const LivenessBeacon&) = delete;
  LivenessBeacon& operator=(const LivenessBeacon&) = delete;
  ~LivenessBeacon();
  // "done CODE": this rank's end is not a failure; it exits with exit_code.
  void finished(int exit_code = 0);

 private:
  int fd_ = -1;
};

}  // namespace strata
