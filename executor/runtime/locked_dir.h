// LockedDir: a directory made for one owner and exclusively flock-ed (file_lock.h) for the
// owner's whole life, removed with its contents when the owner goes; remove_unlocked_dirs:
// the clean-up of the directories whose owners died without removing them.
//
// Liveness is the lock, never a pid: a pid means nothing in another PID namespace (a
// container) or on another node sharing the parent directory. The name still carries the
// creator's pid, for people. A directory never exists unlocked under its final name: it is
// made as .<prefix>new-<pid>-XXXXXX (which clean-up ignores for a minute), locked, and
// renamed into place (renameat2 RENAME_NOREPLACE; the lock follows the inode).
// Users: the NVMe tier's run directories (nvme_store.h) and `strata run`'s job directory
// (OpenMPI's session files and shared-memory segments, the ranks' status records).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "executor/runtime/file_lock.h"

namespace strata {

class LockedDir {
 public:
  // Makes <parent>/<prefix><pid>-XXXXXX (parent must exist). SystemError naming the call
  // and the path on failure, leaving nothing behind.
  LockedDir(const std::filesystem::path& parent, const std::string& prefix);
  // Not movable: held in place (std::optional::emplace) by its owner.
  LockedDir(const LockedDir&) = delete;
  LockedDir& operator=(const LockedDir&) = delete;
  ~LockedDir();  // removes the directory and everything in it, then releases the lock

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::optional<FileLock> lock_;
};

// Removes every <prefix><digits>-XXXXXX directory under parent whose lock it can take (its
// owner is gone; removed while held, so no new owner can be inside) and every
// .<prefix>new-<digits>-XXXXXX one a minute old; returns them, sorted. A missing or
// unreadable parent is not an error (nothing to clean).
std::vector<std::filesystem::path> remove_unlocked_dirs(const std::filesystem::path& parent,
                                                        const std::string& prefix);

}  // namespace strata
