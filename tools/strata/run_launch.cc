// The launch of `strata run`'s ranks (see run_launch.h).
#include "tools/strata/run_launch.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "executor/comm/comm_watch.h"
#include "executor/comm/rank_liveness.h"
#include "executor/offload/nvme_store.h"
#include "executor/runtime/locked_dir.h"
#include "executor/runtime/mpi_launch.h"
#include "executor/runtime/stop_signals.h"
#include "tools/strata/commands.h"
#include "tools/strata/run_nodes.h"

namespace strata::cli {
namespace fs = std::filesystem;
namespace {

constexpr const char* kJobDirPrefix = "strata-job-";

// Shared memory for the job's OpenMPI files and status records: /dev/shm where there is one.
fs::path shm_base() {
  std::error_code ec;
  return fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
}

// Whether every rank said it finished cleanly, allowing the listener's thread a moment to
// read the last ranks' closes after mpirun's end.
bool finished_cleanly(const LivenessListener& liveness, int ranks) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!liveness.all_finished_cleanly(ranks)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace

// The launcher of a multi-rank run: a job directory for OpenMPI's shared-memory files and
// the ranks' status records, mpirun with stops forwarded, and after it whatever ranks that
// were killed could not remove.
int launch_job(const RunOptions& o, const Validated& v, Backend backend) {
  const fs::path shm = shm_base();
  remove_unlocked_dirs(shm, kJobDirPrefix);  // of launchers killed outright
  RelaunchResult result;
  {
    const LockedDir job(shm, kJobDirPrefix);
    RelaunchOptions relaunch;
    relaunch.ranks = static_cast<int>(v.plan.world_size());
    relaunch.stop_grace_s = o.stop_grace_s;
    relaunch.threads = o.threads;
    relaunch.job_dir = job.path().string();
    // mpirun reads the same hostfile; its default mapping (by slot) is the one
    // check_node_layout was given.
    if (!o.hostfile.empty()) {
      relaunch.extra_args = {"--hostfile", fs::absolute(o.hostfile).string()};
      relaunch.quiet = false;  // mpirun names a node it lost
      relaunch.mpi_files_in_job_dir = false;
    }
    // Which rank ended first when the job fails (rank_liveness.h); without the listener
    // the job runs as well, its failure only less precisely named.
    std::optional<LivenessListener> liveness;
    std::vector<std::string> args = relaunch_args(o, v, backend, relaunch.job_dir);
    try {
      liveness.emplace();
      args.insert(args.end(), {"--liveness", liveness->address()});
    } catch (const SystemError&) {
    }
    // mpirun ends a job whose rank died, within a second or two, unless it waits for the
    // daemon of a node that stopped answering: then the job is ended here, kEndAfterS after
    // its first rank ended (that rank's watchdog said why, --comm-timeout-s after the node
    // went quiet).
    constexpr double kEndAfterS = 5;
    std::optional<std::chrono::steady_clock::time_point> first_end;
    if (liveness) {
      relaunch.end_job = [&] {
        const auto now = std::chrono::steady_clock::now();
        if (!first_end && !liveness->unfinished().empty()) first_end = now;
        return first_end && now - *first_end > std::chrono::duration<double>(kEndAfterS);
      };
    }
    result = relaunch_under_mpirun(relaunch, args);
    if (result.ended_by_launcher) {
      result.exit_code = kExitCommTimeout;  // a node that stopped answering
      report_silent_ranks(*liveness, kEndAfterS);
    }
    if (result.stop_signal == 0 && CommWatch::timeout_reported(job.path())) {
      result.exit_code = kExitCommTimeout;  // the watchdog's; mpirun may pass on a killed rank's
    }
    if (liveness && result.stop_signal == 0 && result.exit_code >= 128 &&
        finished_cleanly(*liveness, relaunch.ranks)) {
      // mpirun itself died of a signal after every rank had finished and said so (Open MPI
      // 4.1.4's mpirun segfaults now and then as a job ends): the run is complete.
      std::cerr << fmt::format("strata: mpirun ended with code {} after every rank had finished "
                               "its run; the run is complete\n", result.exit_code)
                << std::flush;
      result.exit_code = 0;
    }
    if (liveness && result.stop_signal == 0) report_first_lost(*liveness, result.exit_code);
  }  // every rank is gone: the job directory goes, with any segment a killed mpirun left
  if (v.uses_nvme()) {  // killed ranks' tensors, on this machine (other nodes: their next run)
    offload::remove_stale_run_dirs(o.nvme_dir);
    remove_stale_node_run_dirs(o.nvme_dir);
  }
  if (result.stop_signal == 0) return result.exit_code;  // the ranks printed their own errors
  const int code = StopSignals::exit_code(result.stop_signal);
  const std::string name = StopSignals::name(result.stop_signal);
  if (result.killed) {
    std::cerr << fmt::format("strata: stopped by {}: the ranks did not finish their step within "
                             "{:g} s (--stop-grace-s) and were killed; no report of this run\n",
                             name, o.stop_grace_s);
  } else if (result.exit_code != code) {
    std::cerr << fmt::format("strata: stopped by {}; the ranks ended with exit code {}\n", name,
                             result.exit_code);
  }
  return code;
}

// libgomp and OpenBLAS read their thread settings from the environment once, when they load,
// so a run in this process (one rank) takes them by executing itself again with them set:
// the count --threads names, and OMP_WAIT_POLICY=passive, as a multi-rank launch gives its
// ranks (mpi_launch.cc). Without passive, an OpenMP thread spins for a while after each
// region on the core that OpenBLAS's own worker needs next: perf showed 55% of a 2-thread
// step's samples in libgomp's spin loop and the step 3x slower than with one thread.
// The second process finds everything set and goes on; a failed exec leaves this one going.
void reexec_with_thread_env(int threads) {
  const std::string count = std::to_string(threads);
  const auto differs = [&](const char* name) {
    const char* value = std::getenv(name);
    return value == nullptr || count != value;
  };
  const bool set_count =
      threads > 0 && (differs("OMP_NUM_THREADS") || differs("OPENBLAS_NUM_THREADS"));
  const bool set_policy = std::getenv("OMP_WAIT_POLICY") == nullptr;
  if (!set_count && !set_policy) return;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> words;
  for (std::string word; std::getline(in, word, '\0');) words.push_back(word);
  if (words.empty()) return;
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  if (set_count) {
    ::setenv("OMP_NUM_THREADS", count.c_str(), 1);
    ::setenv("OPENBLAS_NUM_THREADS", count.c_str(), 1);
  }
  if (set_policy) ::setenv("OMP_WAIT_POLICY", "passive", 1);
  std::cout << std::flush;
  std::cerr << std::flush;
  ::execv("/proc/self/exe", argv.data());  // returns only on failure: go on as we are
}

}  // namespace strata::cli
