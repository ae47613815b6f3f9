// fsync / rename with every error named (see durable_files.h).
#include "executor/checkpoint/durable_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <system_error>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata::checkpoint {
namespace {

std::string errno_text() { return std::error_code(errno, std::generic_category()).message(); }

// An open file descriptor, closed on every path out.
class Fd {
 public:
  Fd(const std::filesystem::path& path, int flags, const char* what) : path_(path) {
    fd_ = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      throw SystemError(fmt::format("checkpoint: cannot open '{}' to {}: {}", path.string(), what,
                                    errno_text()));
    }
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void close_checked() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
      throw SystemError(fmt::format("checkpoint: close of '{}' failed: {}", path_.string(),
                                    errno_text()));
    }
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

void fsync_fd(const Fd& fd, const std::filesystem::path& path) {
  if (::fsync(fd.get()) != 0) {
    throw SystemError(fmt::format("checkpoint: fsync of '{}' failed: {}", path.string(), errno_text()));
  }
}

}  // namespace

void fsync_path(const std::filesystem::path& path) {
  const bool dir = std::filesystem::is_directory(path);
  Fd fd(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY, "fsync it");
  fsync_fd(fd, path);
  fd.close_checked();
}

void write_file_durably(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    Fd fd(tmp, O_WRONLY | O_CREAT | O_TRUNC, "write it");
    const char* data = text.data();
    std::size_t left = text.size();
    while (left > 0) {
      const ssize_t n = ::write(fd.get(), data, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        throw SystemError(fmt::format("checkpoint: write of '{}' failed: {}", tmp.string(),
                                      n < 0 ? errno_text() : std::string("no progress")));
      }
      data += n;
      left -= static_cast<std::size_t>(n);
    }
    fsync_fd(fd, tmp);
    fd.close_checked();
  }
  rename_durably(tmp, path);
}

void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    throw SystemError(fmt::format("checkpoint: rename of '{}' to '{}' failed: {}", from.string(),
                                  to.string(), errno_text()));
  }
  const std::filesystem::path parent = to.has_parent_path() ? to.parent_path() : ".";
  fsync_path(parent);
}

}  // namespace strata::checkpoint
