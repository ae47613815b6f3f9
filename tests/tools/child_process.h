// Test helper: the strata binary started in the background (fork + exec) with its output in
// files, so that a test can signal it, its mpirun and its ranks, and time how it ends.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace strata::testing {

namespace fs = std::filesystem;

struct Child {
  pid_t pid = -1;
  fs::path out, err;  // its stdout and stderr
};

// argv[0] is executed as is (no PATH search); one BLAS thread per process.
inline Child spawn(const std::vector<std::string>& argv, const fs::path& dir,
                   const std::string& tag) {
  Child c;
  c.out = dir / (tag + ".out");
  c.err = dir / (tag + ".err");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::string out = c.out.string(), err = c.err.string(), cwd = dir.string();
  c.pid = ::fork();
  if (c.pid == 0) {
    ::setenv("OMP_NUM_THREADS", "1", 1);
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
    if (::chdir(cwd.c_str()) != 0) ::_exit(126);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return c;
}

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Polls until `file` contains `text`; false after timeout_s.
inline bool wait_for_text(const fs::path& file, const std::string& text, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (read_file(file).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Waits for the child to end: its exit code (128 + signal when killed), or -1 after
// timeout_s (it is then killed). elapsed_s: seconds until it ended.
inline int wait_exit(pid_t pid, double timeout_s, double* elapsed_s) {
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      *elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(timeout_s)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      *elapsed_s = timeout_s;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Lines of text that are not empty.
inline int count_lines(const std::string& text) {
  int n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.empty() ? 0 : 1;
  return n;
}

inline bool process_exists(pid_t pid) { return fs::exists(fs::path("/proc") / std::to_string(pid)); }

}  // namespace strata::testing
