// Launcher detection from the environment, and re-execution of this binary under mpirun
// with fork + execvpe + waitpid (see mpi_launch.h).
#include "executor/runtime/mpi_launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cost_model/specs/errors.h"
#include "executor/runtime/stop_signals.h"

namespace strata {
namespace {

// The value of an integer environment variable, or fallback when it is unset.
int env_int(const char* name, int fallback, bool* present) {
  const char* text = std::getenv(name);
  if (text == nullptr) {
    return fallback;
  }
  int value = 0;
  const char* end = text + std::strlen(text);
  const auto [ptr, ec] = std::from_chars(text, end, value);
  if (ec != std::errc() || ptr != end || value < 0) {
    throw ConfigError(fmt::format("environment variable {}='{}': expected a non-negative integer",
                                  name, text));
  }
  if (present != nullptr) *present = true;
  return value;
}

std::string errno_text(int error) { return std::strerror(error); }

// SLURM_TASKS_PER_NODE's entry for node `node`: the list srun sets, "2(x3),1" meaning 2
// tasks on each of the first three nodes and 1 on the fourth. SLURM_NTASKS_PER_NODE (set
// only with --ntasks-per-node) wins; without either, every task on one node.
int slurm_tasks_on_node(int node, int world_size) {
  bool uniform = false;
  const int per_node = env_int("SLURM_NTASKS_PER_NODE", 0, &uniform);
  if (uniform) return per_node;
  const char* text = std::getenv("SLURM_TASKS_PER_NODE");
  if (text == nullptr) return world_size;
  const auto bad = [&] {
    return ConfigError(fmt::format("environment variable SLURM_TASKS_PER_NODE='{}': expected "
                                   "counts like 2(x3),1", text));
  };
  int first = 0;  // the first node of the current entry
  for (const char* p = text; *p != '\0';) {
    int tasks = 0, repeat = 1;
    const char* end = text + std::strlen(text);
    auto r = std::from_chars(p, end, tasks);
    if (r.ec != std::errc()) throw bad();
    p = r.ptr;
    if (*p == '(') {
      if (std::strncmp(p, "(x", 2) != 0) throw bad();
      r = std::from_chars(p + 2, end, repeat);
      if (r.ec != std::errc() || *r.ptr != ')') throw bad();
      p = r.ptr + 1;
    }
    if (node < first + repeat) return tasks;
    first += repeat;
    if (*p == ',') ++p;
    else if (*p != '\0') throw bad();
  }
  throw ConfigError(fmt::format("environment variable SLURM_TASKS_PER_NODE='{}' lists {} nodes, "
                                "but SLURM_NODEID is {}", text, first, node));
}

}  // namespace

LaunchEnv detect_launch_env() {
  LaunchEnv env;
  bool ompi = false;
  env.world_size = env_int("OMPI_COMM_WORLD_SIZE", 1, &ompi);
  if (ompi) {
    env.under_launcher = true;
    env.launcher = "mpirun";
    env.world_rank = env_int("OMPI_COMM_WORLD_RANK", 0, nullptr);
    env.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, nullptr);
    env.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", env.world_size, nullptr);
    return env;
  }
  // srun: only inside a job step; sbatch sets SLURM_PROCID=0 for the batch script too.
  if (std::getenv("SLURM_PROCID") != nullptr &&
      (std::getenv("SLURM_STEP_ID") != nullptr || std::getenv("SLURM_STEPID") != nullptr)) {
    env.under_launcher = true;
    env.launcher = "srun";
    env.world_size = env_int("SLURM_NTASKS", 1, nullptr);
    env.world_rank = env_int("SLURM_PROCID", 0, nullptr);
    env.local_rank = env_int("SLURM_LOCALID", 0, nullptr);
    env.node_id = env_int("SLURM_NODEID", 0, nullptr);
    env.node_count = env_int("SLURM_NNODES", env_int("SLURM_JOB_NUM_NODES", 1, nullptr), nullptr);
    env.local_size = slurm_tasks_on_node(env.node_id, env.world_size);
    return env;
  }
  bool pmi = false;
  env.world_size = env_int("PMI_SIZE", 1, &pmi);
  if (pmi) {
    env.under_launcher = true;
    env.launcher = "PMI launcher";
    env.world_rank = env_int("PMI_RANK", 0, nullptr);
    env.local_rank = env_int("MPI_LOCALRANKID", env.world_rank, nullptr);
    env.local_size = env_int("MPI_LOCALNRANKS", env.world_size, nullptr);
  }
  return env;
}

bool running_under_mpirun() { return detect_launch_env().under_launcher; }

int threads_per_rank(int ranks, int cores) {
  if (ranks <= 1) {
    return cores > 0 ? cores : 1;
  }
  return cores / ranks > 1 ? cores / ranks : 1;
}

std::vector<std::string> mpirun_command(const RelaunchOptions& options, const std::string& binary,
                                        const std::vector<std::string>& args,
                                        bool running_as_root) {
  std::vector<std::string> command{options.mpirun};
  if (options.quiet) command.push_back("-q");
  command.insert(command.end(), {"-np", std::to_string(options.ranks), "--oversubscribe",
                                 "--bind-to", "none"});
  if (running_as_root) {
    command.push_back("--allow-run-as-root");
  }
  // -x exports the variables (set in mpirun's environment before exec) to every rank.
  for (const char* name : {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "OMP_WAIT_POLICY"}) {
    command.push_back("-x");
    command.push_back(name);
  }
  // The kernel path the user chose (kernels/cpu/kernel_path.h), where chosen: every rank, on
  // every node, must compute the bits this process would.
  for (const char* name : {"STRATA_CPU_ISA", "OPENBLAS_CORETYPE"}) {
    if (std::getenv(name) == nullptr) continue;
    command.push_back("-x");
    command.push_back(name);
  }
  command.insert(command.end(), options.extra_args.begin(), options.extra_args.end());
  command.push_back(binary);
  command.insert(command.end(), args.begin(), args.end());
  return command;
}

std::vector<int> child_pids(int parent) {
  std::vector<int> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(it->path() / "stat");
    std::string text;
    if (!in || !std::getline(in, text)) continue;  // gone meanwhile
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    const auto close = text.rfind(')');
    if (close == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(text.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == parent) {
      out.push_back(std::stoi(name));
    }
  }
  return out;
}

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// SIGKILL to every child of `parent` (a job's ranks, or what a killed mpirun orphaned here).
void kill_children(int parent) {
  for (const int pid : child_pids(parent)) ::kill(pid, SIGKILL);
}

// Waits for mpirun (pid) while forwarding stops (mpi_launch.h, "Stopping"); returns its
// wait status.
int wait_forwarding_stops(pid_t pid, const RelaunchOptions& options, RelaunchResult& result) {
  constexpr auto kPoll = std::chrono::milliseconds(20);
  constexpr double kKillAfterTermS = 2.0;  // mpirun's own SIGTERM -> SIGKILL takes 1 s
  double forwarded_at = 0, terminated_at = 0;
  bool terminated = false, killed = false;
  while (true) {
    int status = 0;
    const pid_t waited = waitpid(pid, &status, WNOHANG);
    if (waited == pid) return status;
    if (waited < 0 && errno != EINTR) {
      throw SystemError(fmt::format("waitpid({}) failed at {}:{}: {}", pid, __FILE__, __LINE__,
                                    errno_text(errno)));
    }
    const int signal = StopSignals::received();
    const double now = now_s();
    if (signal != 0 && result.stop_signal == 0) {
      result.stop_signal = signal;
      forwarded_at = now;
      ::kill(pid, signal == SIGINT ? SIGUSR1 : SIGUSR2);  // mpirun passes these to the ranks
    }
    if (result.stop_signal != 0 && !terminated &&
        (now - forwarded_at > options.stop_grace_s || StopSignals::count() > 1)) {
      terminated = true;
      terminated_at = now;
      result.killed = true;
      ::kill(pid, SIGTERM);  // mpirun ends the job: SIGTERM to the ranks, SIGKILL 1 s later
    }
    if (!terminated && options.end_job && options.end_job()) {
      // A job mpirun cannot end (a daemon on a node that stopped answering): ended here.
      terminated = true;
      terminated_at = now;
      result.ended_by_launcher = true;
      ::kill(pid, SIGTERM);
    }
    if (terminated && !killed && now - terminated_at > kKillAfterTermS) {
      killed = true;
      kill_children(pid);
      ::kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace

RelaunchResult relaunch_under_mpirun(const RelaunchOptions& options,
                                     const std::vector<std::string>& args) {
  if (options.ranks < 1) {
    throw InfeasiblePlan(fmt::format("relaunch under mpirun: {} ranks requested, expected >= 1",
                                     options.ranks));
  }
  if (running_under_mpirun()) {
    throw SystemError(
        "relaunch under mpirun: this process is already an MPI rank (OMPI_COMM_WORLD_SIZE or "
        "PMI_SIZE is set); refusing to start mpirun inside mpirun");
  }
  char binary[PATH_MAX] = {};
  const ssize_t length = readlink("/proc/self/exe", binary, sizeof(binary) - 1);
  if (length < 0) {
    throw SystemError(fmt::format("readlink(/proc/self/exe) failed at {}:{}: {}", __FILE__,
                                  __LINE__, errno_text(errno)));
  }
  const std::vector<std::string> command =
      mpirun_command(options, std::string(binary, static_cast<size_t>(length)), args,
                     geteuid() == 0);
  const int cores = options.cores > 0 ? options.cores
                                      : static_cast<int>(std::thread::hardware_concurrency());
  const bool forced_threads = options.threads > 0;
  const std::string threads =
      std::to_string(forced_threads ? options.threads : threads_per_rank(options.ranks, cores));
  const auto is_thread_variable = [](const char* entry) {
    return std::strncmp(entry, "OPENBLAS_NUM_THREADS=", 21) == 0 ||
           std::strncmp(entry, "OMP_NUM_THREADS=", 16) == 0;
  };

  // A close-on-exec pipe carries the child's errno back if execvp fails; a successful exec
  // closes it and the parent reads end-of-file.
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    throw SystemError(fmt::format("pipe2 failed at {}:{}: {}", __FILE__, __LINE__,
                                  errno_text(errno)));
  }
  // argv and environment are built before fork: between fork and exec the child only makes
  // async-signal-safe calls (the parent may have BLAS threads running).
  std::vector<char*> child_argv;
  for (const std::string& word : command) child_argv.push_back(const_cast<char*>(word.c_str()));
  child_argv.push_back(nullptr);
  std::vector<std::string> added_env;
  for (const char* name : {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"}) {
    // The caller's explicit setting wins, unless --threads named a count.
    if (forced_threads || std::getenv(name) == nullptr) {
      added_env.push_back(std::string(name) + "=" + threads);
    }
  }
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) added_env.push_back("OMP_WAIT_POLICY=passive");
  if (!options.job_dir.empty() && options.mpi_files_in_job_dir) {
    // OpenMPI 4 reads MCA parameters from the environment (and passes them to the ranks);
    // another MPI ignores them.
    added_env.push_back("OMPI_MCA_orte_tmpdir_base=" + options.job_dir);
    added_env.push_back("OMPI_MCA_btl_vader_backing_directory=" + options.job_dir);
  }
  // A rank orphaned by a killed mpirun comes here, to be killed and reaped.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    throw SystemError(fmt::format("prctl(PR_SET_CHILD_SUBREAPER) failed at {}:{}: {}", __FILE__,
                                  __LINE__, errno_text(errno)));
  }
  const pid_t parent = ::getpid();
  std::vector<char*> child_env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (forced_threads && is_thread_variable(*entry)) continue;  // replaced by added_env's
    child_env.push_back(*entry);
  }
  for (std::string& entry : added_env) child_env.push_back(entry.data());
  child_env.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    throw SystemError(fmt::format("fork failed at {}:{}: {}", __FILE__, __LINE__,
                                  errno_text(error)));
  }
  if (pid == 0) {
    // Only async-signal-safe calls until exec (see above).
    close(pipe_fds[0]);
    ::setpgid(0, 0);                      // out of the terminal's foreground group
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);   // this process killed outright: mpirun ends the job
    if (::getppid() != parent) _exit(127);  // it died before the line above
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) {
      ::dup2(null_fd, STDIN_FILENO);
      ::close(null_fd);
    }
    execvpe(child_argv[0], child_argv.data(), child_env.data());
    const int error = errno;
    [[maybe_unused]] ssize_t ignored = write(pipe_fds[1], &error, sizeof(error));
    _exit(127);
  }
  close(pipe_fds[1]);
  int exec_error = 0;
  ssize_t got = 0;
  do {
    got = read(pipe_fds[0], &exec_error, sizeof(exec_error));
  } while (got < 0 && errno == EINTR);
  close(pipe_fds[0]);

  RelaunchResult result;
  const int status = wait_forwarding_stops(pid, options, result);
  // Whatever mpirun left (ranks it could not end, when it was killed) is ours now: gone.
  for (int round = 0; round < 50; ++round) {
    const std::vector<int> left = child_pids(parent);
    if (left.empty()) break;
    for (const int child : left) ::kill(child, SIGKILL);
    for (const int child : left) ::waitpid(child, nullptr, 0);
  }
  if (got == static_cast<ssize_t>(sizeof(exec_error))) {
    throw SystemError(fmt::format("execvpe({}) failed at {}:{}: {}", command[0], __FILE__,
                                  __LINE__, errno_text(exec_error)));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status)
                     : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                           : 1;
  return result;
}

}  // namespace strata
