// Whether a directory is the same directory for every rank of a job (`strata run --out`,
// `--save` across nodes): a directory on a node-local disk exists on every node under the
// same path but is a different directory on each, and a report or checkpoint written there
// would be split over the nodes without a word.
//
// The check: each rank writes a probe file <dir>/.strata-probe-<job>-<rank> (job: a random
// number rank 0 draws, so a stale probe of another job never counts), all ranks wait, each
// looks for every rank's probe, the ranks gather what each saw, and each removes its own.
// Deliberately not here: creating the directory (tools/strata/run_checks.cc, on every
// rank before this).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "executor/comm/communicator.h"
#include "executor/comm/node_layout.h"

namespace strata {

// Collective over `world` (whose ranks are the layout's). ConfigError (the same on every
// rank) naming the flag, the directory and, for each host, the hosts whose probes it does
// not see; SystemError when this rank cannot write its probe.
void check_dir_shared(const std::string& flag, const std::filesystem::path& dir,
                      Communicator& world, const NodeLayout& layout);

// The message for seen[r][q] (rank r sees rank q's probe), or empty when every rank sees
// every probe.
std::string unshared_dir_message(const std::string& flag, const std::filesystem::path& dir,
                                 const std::vector<std::vector<bool>>& seen,
                                 const NodeLayout& layout);

}  // namespace strata
