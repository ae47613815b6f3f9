// Test helper: runs a command through the shell to its end and keeps its exit code and what
// it printed, and `strata <args>` in a directory (STRATA_BINARY, compiled in by the test's
// CMake fragment). For a strata started in the background to be signalled: child_process.h.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace strata::testing {

struct CommandResult {
  int exit_code = -1;  // -1: it did not start, or ended by a signal
  std::string output;  // what the command's redirections leave on its stdout
};

inline CommandResult run_shell(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer;
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) r.output += buffer.data();
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

#ifdef STRATA_BINARY
// `strata <args>` run in `dir` with `env` (assignments like "OMP_NUM_THREADS=1") before it;
// streams: "2>&1" (both) or "2>&1 >/dev/null" (stderr only).
inline CommandResult run_strata(const std::filesystem::path& dir, const std::string& args,
                                const std::string& env = "",
                                const std::string& streams = "2>&1") {
  return run_shell("cd '" + dir.string() + "' && " + env + " '" + std::string(STRATA_BINARY) +
                   "' " + args + " " + streams);
}
#endif

}  // namespace strata::testing
