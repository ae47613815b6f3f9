// `strata run` across nodes, the pieces run.cc uses: the rank layout the launch will have
// (hostfile, --nodes, one machine) and the one a running job has (each rank's host, gathered
// over MPI), both checked by executor/comm/node_layout.h; each node's directory under
// --nvme-dir; and, after a failed launch, the line naming the rank and host that ended first
// (executor/comm/rank_liveness.h).
#pragma once

#include <filesystem>
#include <string>
#include <utility>

#include "executor/comm/mpi_communicator.h"
#include "executor/comm/node_layout.h"
#include "executor/comm/rank_liveness.h"
#include "executor/runtime/mpi_launch.h"
#include "tools/strata/run_common.h"

namespace strata::cli {

// The layout the launch will have, decided before it starts: the hostfile's slots, the
// --nodes grouping, else one machine; with the launch's name for messages.
std::pair<NodeLayout, std::string> planned_layout(const RunOptions& o, const Validated& v);

// The layout of the running job: the --nodes grouping its launcher passed on (InfeasiblePlan
// when it makes another rank count than `launch` started), else each rank's host gathered
// over `world`. Collective.
std::pair<NodeLayout, std::string> running_layout(const RunOptions& o, MpiCommunicator& world,
                                                  const LaunchEnv& launch);

// Each rank's host (MPI_Get_processor_name) gathered over `world`, as a layout. Collective.
NodeLayout gathered_layout(MpiCommunicator& world);

// Where this rank's NVMe files go: --nvme-dir itself on one node; across nodes
// <nvme-dir>/node-<host>, made if missing, so that two nodes never touch each other's
// files even when --nvme-dir is on a shared filesystem (each rank's run directory in it is
// locked, nvme_store.h). SystemError when it cannot be made.
std::string node_nvme_dir(const RunOptions& o, const Validated& v, const NodeLayout& layout,
                          int world_rank);

// The stale run directories in every node directory under nvme_dir (those of this machine's
// nodes; another machine's are cleaned by its next run).
void remove_stale_node_run_dirs(const std::filesystem::path& nvme_dir);

// After a job that failed otherwise than by a rank's own error (exit 2, printed by the
// rank), a plan that does not fit (3) or the watchdog (4, its own message): one line on
// stderr naming the rank that ended first without finishing and its host.
void report_first_lost(const LivenessListener& liveness, int exit_code);

// After the launcher ended an mpirun that had not ended the job `after_s` seconds after its
// first rank ended: one line naming the ranks never heard ending (their node stopped
// answering, most likely).
void report_silent_ranks(const LivenessListener& liveness, double after_s);

}  // namespace strata::cli
