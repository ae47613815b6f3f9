// StopSignals: SIGINT and SIGTERM turned into a request to stop, for `strata run` (the
// parent that launched mpirun, and every rank).
//
// While a StopSignals lives, the handlers record the first signal in a lock-free atomic (the
// one piece of global mutable state the style allows: a handler can reach nothing else) and
// return; the owner polls received() at moments where stopping is clean (between training
// steps, in the launcher's wait loop) and decides what to do. SIGUSR1 and SIGUSR2 count as
// SIGINT and SIGTERM: mpirun forwards those two to every rank and kills the job on the
// others, so the parent forwards a stop as SIGUSR1/2 (mpi_launch.h). A second SIGINT or
// SIGTERM is recorded as well (count()): the parent escalates on it.
// The destructor restores the previous handlers. Not reentrant: one owner per process.
// Deliberately not here: what a stop does (the run loop and the launcher decide).
#pragma once

#include <signal.h>

#include <string>

namespace strata {

class StopSignals {
 public:
  StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  ~StopSignals();

  // 0 while no stop was asked for, else SIGINT or SIGTERM (the first one received).
  static int received();
  // How many stop signals arrived so far.
  static int count();
  // Exit code of a run stopped by `signal`: 128 + signal (130 for SIGINT, 143 for SIGTERM).
  static int exit_code(int signal) { return 128 + signal; }
  // "SIGINT", "SIGTERM", or "signal N".
  static std::string name(int signal);

 private:
  struct sigaction previous_[4];  // SIGINT, SIGTERM, SIGUSR1, SIGUSR2 as they were
};

}  // namespace strata
