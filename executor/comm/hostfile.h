// Open MPI's hostfile format, as `strata run --hostfile FILE` reads it to lay out the ranks
// before it hands the same file to mpirun: one host per line, "host slots=K" (K ranks on
// it; slots omitted: 1), "#" starts a comment, other key=value words (max_slots=...) are
// mpirun's and ignored here. A host listed twice adds its slots, as mpirun does.
#pragma once

#include <string>
#include <vector>

#include "executor/comm/node_layout.h"

namespace strata {

// ConfigError naming the file, the line and the word when the file cannot be read, a line
// is malformed (slots not a positive integer) or no host is listed.
std::vector<HostSlots> read_hostfile(const std::string& path);
std::vector<HostSlots> parse_hostfile(const std::string& text, const std::string& source);

}  // namespace strata
