// FileLock: an exclusive flock(2) on a file or a directory, held for the owner's lifetime
// (move-only RAII; closing the descriptor releases it, also when the process dies, so a lock
// never outlives its holder and never needs cleaning up).
//
// Used to say "in use" without PIDs, which mean nothing across PID namespaces (containers)
// and nodes sharing a directory: `strata run` and `strata select` hold one on --out
// (<out>/.strata.lock) so that a second run into it is refused; each NVMe run directory is
// locked by its store, and start-up clean-up removes only directories whose lock it can take.
// flock locks belong to the open file description: two opens of one file conflict even
// within one process, and a forked child without the descriptor holds nothing.
// Deliberately not here: waiting for a lock (every caller wants to know at once).
#pragma once

#include <filesystem>
#include <optional>

namespace strata {

class FileLock {
 public:
  // Opens `path` and takes LOCK_EX | LOCK_NB. With create, a missing regular file is made
  // (mode 0644); without, the path must exist (a directory is fine). Returns nullopt when
  // another open file description holds the lock, and also when `path` vanished before it
  // could be opened (create == false: whoever removed it held the lock). Throws SystemError
  // naming the call and path on any other failure.
  static std::optional<FileLock> try_acquire(const std::filesystem::path& path, bool create);

  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

  const std::filesystem::path& path() const { return path_; }

 private:
  FileLock(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::filesystem::path path_;
};

}  // namespace strata
