// FileLock over open(2) + flock(2); see file_lock.h.
#include "executor/runtime/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata {

std::optional<FileLock> FileLock::try_acquire(const std::filesystem::path& path, bool create) {
  // O_RDONLY opens directories as well as files; flock needs no write access.
  const int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0);
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == ENOENT && !create) return std::nullopt;
    throw SystemError(fmt::format("open('{}') for a lock failed: {} (errno {})", path.string(),
                                  std::strerror(errno), errno));
  }
  int rc = 0;
  do {
    rc = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) return std::nullopt;
    throw SystemError(fmt::format("flock('{}', LOCK_EX) failed: {} (errno {})", path.string(),
                                  std::strerror(err), err));
  }
  return FileLock(fd, path);
}

FileLock::FileLock(FileLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace strata
