// Helpers for the offload tests: a scratch directory removed at the end of each test, a
// deterministic byte pattern, and a scoped RLIMIT_FSIZE (the honest way to make writes fail
// with EFBIG on a machine where a tiny full filesystem cannot be mounted).
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace strata::offload::testing {

class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "strata-offload-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Files (recursively) under dir; a missing dir has none.
inline std::vector<std::filesystem::path> files_under(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return out;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) out.push_back(entry.path());
  }
  return out;
}

// Byte i of pattern `seed`: an LCG-like mix so any misplaced block shows.
inline void fill_pattern(std::byte* p, std::int64_t bytes, std::uint32_t seed) {
  std::uint32_t x = seed * 2654435761u + 1u;
  for (std::int64_t i = 0; i < bytes; ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = static_cast<std::byte>(x >> 24);
  }
}

// Caps the size of files this process writes (RLIMIT_FSIZE) and ignores SIGXFSZ, so a write
// past the cap fails with EFBIG instead of killing the process; both restored on exit.
class ScopedFileSizeLimit {
 public:
  explicit ScopedFileSizeLimit(rlim_t bytes) {
    if (::getrlimit(RLIMIT_FSIZE, &old_) != 0) throw std::runtime_error("getrlimit failed");
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    if (::sigaction(SIGXFSZ, &ignore, &old_action_) != 0) {
      throw std::runtime_error("sigaction failed");
    }
    rlimit limit = old_;
    limit.rlim_cur = bytes;
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) throw std::runtime_error("setrlimit failed");
  }
  ~ScopedFileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::sigaction(SIGXFSZ, &old_action_, nullptr);
  }
  ScopedFileSizeLimit(const ScopedFileSizeLimit&) = delete;
  ScopedFileSizeLimit& operator=(const ScopedFileSizeLimit&) = delete;

 private:
  rlimit old_{};
  struct sigaction old_action_ {};
};

}  // namespace strata::offload::testing
