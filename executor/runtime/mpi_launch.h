// Running under mpirun: detect it (and this process's rank), and re-execute the current
// binary with the same arguments under `mpirun -np N` when a plan needs N > 1 ranks.
//
// Detection reads the launcher's environment, so it works before MPI_Init: Open MPI's
// mpirun (OMPI_COMM_WORLD_SIZE / _RANK / _LOCAL_RANK / _LOCAL_SIZE), SLURM's srun
// (SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID / SLURM_NODEID / SLURM_NNODES and the tasks
// per node; only inside a job step, SLURM_STEP_ID, so a batch script's own variables do not
// count), else PMI_SIZE / PMI_RANK from MPICH-style launchers. Deliberately not here: which
// node each rank is on and the rules a plan's groups keep across nodes
// (executor/comm/node_layout.h), hostfiles (executor/comm/hostfile.h).
//
// Stopping: mpirun runs in a process group of its own (a terminal's Ctrl-C reaches only this
// process, which decides), with stdin from /dev/null (a background group reading the
// terminal would be stopped) and SIGTERM as its parent-death signal (if this process is
// killed outright, mpirun ends the job). While a StopSignals (stop_signals.h) lives here, a
// SIGINT or SIGTERM is forwarded as SIGUSR1 / SIGUSR2, which mpirun passes to every rank
// (and which the ranks read as SIGINT / SIGTERM); they finish their step, write what they
// have and exit. If they have not within stop_grace_s (or at a second signal), mpirun gets
// SIGTERM (it kills the ranks: SIGTERM, then SIGKILL a second later), and 2 s later the
// ranks and mpirun get SIGKILL. This process is a child subreaper meanwhile, so a rank
// orphaned by a killed mpirun is reparented here and killed too: every rank is gone when
// the call returns. With a job_dir, OpenMPI's session directory and shared-memory segments
// go in it (OMPI_MCA_orte_tmpdir_base, OMPI_MCA_btl_vader_backing_directory): what a killed
// mpirun leaves behind is removed with that directory (job_dir.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace strata {

struct LaunchEnv {
  bool under_launcher = false;  // started by mpirun, srun (or a PMI launcher)
  std::string launcher;         // "mpirun", "srun", "PMI launcher"; empty when none
  int world_size = 1;
  int world_rank = 0;
  int local_rank = 0;           // rank among the processes on this node
  int local_size = 1;
  int node_id = -1;             // this node's index when the launcher says (srun), else -1
  int node_count = 0;           // nodes of the job when the launcher says (srun), else 0
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
  // Threads per rank (`strata run --threads`): when > 0, OPENBLAS_NUM_THREADS and
  // OMP_NUM_THREADS are set to it for every rank whatever the caller's environment says.
  int threads = 0;
  // After a stop is forwarded, how long the ranks get to finish their step and exit.
  double stop_grace_s = 3.0;
  // Where OpenMPI's session directory and shared-memory segments go (empty: its defaults).
  std::string job_dir;
  // False across nodes: the daemons of the other nodes would make job_dir there (it is
  // this machine's) and leave it behind; Open MPI's defaults, which it cleans, instead.
  bool mpi_files_in_job_dir = true;
  // -q (below). Off for a launch across nodes: -q also silences mpirun's message naming
  // the node whose daemon it lost, the one line that says a node went away.
  bool quiet = true;
  // Polled while mpirun runs: true ends the job as a second stop would (SIGTERM to mpirun,
  // SIGKILL 2 s later). For what mpirun does not end by itself: a job whose rank ended
  // while a node stopped answering, so that mpirun waits for a daemon it cannot reach.
  std::function<bool()> end_job;
};

struct RelaunchResult {
  int exit_code = 0;    // mpirun's (128 + signal if it was killed)
  int stop_signal = 0;  // SIGINT or SIGTERM if one was forwarded to the ranks, else 0
  bool killed = false;  // the ranks did not stop within stop_grace_s and were killed
  bool ended_by_launcher = false;  // end_job asked for it
};

// The full command line relaunch_under_mpirun runs (pure; for tests and for error messages):
//   mpirun [-q] -np N --oversubscribe --bind-to none [--allow-run-as-root] -x OPENBLAS_NUM_THREADS
//          -x OMP_NUM_THREADS -x OMP_WAIT_POLICY [extra_args...] <binary> <args...>
// The ranks get OMP_WAIT_POLICY=passive unless the caller sets it: an OpenMP thread that
// waits for work sleeps instead of spinning, so on cores shared with other ranks or other
// jobs it does not take the time of the thread it waits for (issue 19: 2 threads on a busy
// 2-core VM ran the attention 3x slower than one thread with libgomp's default spinning,
// and faster than one thread with passive waiting).
// -q: mpirun's banners about a rank's non-zero exit would repeat what the rank printed (a
// rank killed by a signal is still reported).
// --allow-run-as-root is added when running_as_root.
std::vector<std::string> mpirun_command(const RelaunchOptions& options, const std::string& binary,
                                        const std::vector<std::string>& args,
                                        bool running_as_root);

// Threads per rank as described in RelaunchOptions::cores.
int threads_per_rank(int ranks, int cores);

// Runs /proc/self/exe with args (argv[1..]) under mpirun, with stdout/stderr inherited (the
// ranks' output appears on ours), waits for it (forwarding stops as above) and returns how
// it ended. Throws SystemError if mpirun cannot be started, and InfeasiblePlan if
// options.ranks < 1. Must not be called from a process that is itself a rank
// (running_under_mpirun()); that throws SystemError instead of recursing.
RelaunchResult relaunch_under_mpirun(const RelaunchOptions& options,
                                     const std::vector<std::string>& args);

// The pids of the processes whose parent is `parent` (from /proc), for killing a job's ranks.
std::vector<int> child_pids(int parent);

}  // namespace strata
