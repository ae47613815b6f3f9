// The --out directory of `strata run` and `strata select`: created when missing, writable,
// and held for the run by a lock file in it, so that a second run into the same directory is
// refused at its start instead of overwriting this one's report without a word.
#pragma once

#include <string>

#include "executor/runtime/file_lock.h"

namespace strata::cli {

// Creates `out` if missing; ConfigError naming `flag` (--out, or --save for checkpoints) when
// it cannot be made or written.
void check_out_dir(const std::string& out, const char* flag = "--out");

// check_out_dir, then the lock (DIR/.strata.lock, flock), held as long as the returned
// FileLock lives; ConfigError when another run holds it.
FileLock lock_out_dir(const std::string& out);

}  // namespace strata::cli
