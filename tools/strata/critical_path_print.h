// The critical path as text (`strata predict --critical-path`): the path cut into runs of
// consecutive ops on one rank (a pipeline's path crosses ranks at its messages, so a step's
// path is a few dozen runs, not thousands of ops), each with where it starts, how long it
// takes and what it waited for to start; the path's share by kind; the longest ops off the
// path with their slack.
#pragma once

#include <ostream>

#include "cost_model/checks/critical_path.h"

namespace strata::cli {

void print_critical_path(std::ostream& out, const CriticalPath& path);

}  // namespace strata::cli
