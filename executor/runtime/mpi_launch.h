// Running under mpirun: detect it (and this process's rank), and re-execute the current
// binary with the same arguments under `mpirun -np N` when a plan needs N > 1 ranks.
//
// Detection reads the launcher's environment (OpenMPI: OMPI_COMM_WORLD_SIZE / _RANK /
// _LOCAL_RANK / _LOCAL_SIZE; also PMI_SIZE / PMI_RANK from MPICH/Slurm-style launchers), so
// it works before MPI_Init. Deliberately not here: hostfiles and multi-node placement
// (mpirun's own flags can be passed through extra_args).
#pragma once

#include <string>
#include <vector>

namespace strata {

struct LaunchEnv {
  bool under_launcher = false;  // started by mpirun (or a PMI launcher)
  int world_size = 1;
  int world_rank = 0;
  int local_rank = 0;           // rank among the processes on this node
  int local_size = 1;
};

// Throws ConfigError when a launcher variable is present but not a valid integer.
LaunchEnv detect_launch_env();
bool running_under_mpirun();

struct RelaunchOptions {
  int ranks = 1;
  std::string mpirun = "mpirun";            // looked up on PATH
  std::vector<std::string> extra_args;      // inserted before the binary
  // Cores on this machine (0 = std::thread::hardware_concurrency()). Ranks get
  // OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = max(1, cores / ranks) unless the caller's
  // environment already sets them: on the 2-core CI machine 2..8 ranks get 1 thread each,
  // since oversubscribed BLAS threads spin against each other and slow every rank down.
  int cores = 0;
};

// The full command line relaunch_under_mpirun runs (pure; for tests and for error messages):
//   mpirun -np N --oversubscribe --bind-to none [--allow-run-as-root] -x OPENBLAS_NUM_THREADS
//          -x OMP_NUM_THREADS [extra_args...] <binary> <args...>
// --allow-run-as-root is added when running_as_root.
std::vector<std::string> mpirun_command(const RelaunchOptions& options, const std::string& binary,
                                        const std::vector<std::string>& args,
                                        bool running_as_root);

// Threads per rank as described in RelaunchOptions::cores.
int threads_per_rank(int ranks, int cores);

// Runs /proc/self/exe with args (argv[1..]) under mpirun, with stdin/stdout/stderr
// inherited (the ranks' output appears on ours), waits for it and returns its exit code
// (128 + signal if it was killed). Throws SystemError if mpirun cannot be started, and
// InfeasiblePlan if options.ranks < 1. Must not be called from a process that is itself a
// rank (running_under_mpirun()); that throws SystemError instead of recursing.
int relaunch_under_mpirun(const RelaunchOptions& options, const std::vector<std::string>& args);

}  // namespace strata
