// How `strata run` starts its ranks: a multi-rank job relaunched under mpirun (stops forwarded,
// a lost rank named, a job directory for Open MPI's files cleaned after), and a one-rank run
// executed again with its thread environment set. Deliberately not here: what a rank does
// (run.cc), the mpirun command line (executor/runtime/mpi_launch.h).
#pragma once

#include "tools/strata/run_common.h"

namespace strata::cli {

// The launcher of a multi-rank run; returns the job's exit code (0: every rank finished).
int launch_job(const RunOptions& o, const Validated& v, Backend backend);

// Executes this process again with the thread count `threads` names (0: the default) and
// OMP_WAIT_POLICY=passive set, when they are not set already; returns only when nothing
// needs setting or the exec failed.
void reexec_with_thread_env(int threads);

}  // namespace strata::cli
