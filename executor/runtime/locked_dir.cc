// LockedDir and the lock-based clean-up (see locked_dir.h).
#include "executor/runtime/locked_dir.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata {
namespace {

// "<prefix><digits>-XXXXXX" (mkdtemp's six characters).
bool owned_name(const std::string& name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return false;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  long number = -1;
  const auto [ptr, ec] = std::from_chars(first, last, number);
  return ec == std::errc() && ptr != first && last - ptr == 7 && *ptr == '-';
}

std::string hidden_prefix(const std::string& prefix) { return "." + prefix + "new-"; }

// Old enough that its maker is surely past the moment between mkdtemp and flock.
bool older_than_a_minute(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  return ::time(nullptr) - st.st_mtime > 60;
}

}  // namespace

LockedDir::LockedDir(const std::filesystem::path& parent, const std::string& prefix) {
  std::string pattern = (parent / fmt::format("{}{}-XXXXXX", hidden_prefix(prefix), ::getpid())).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw SystemError(fmt::format("mkdtemp('{}') failed: {} (errno {})", pattern,
                                  std::strerror(errno), errno));
  }
  const std::filesystem::path made = pattern;
  std::error_code ignored;
  try {
    lock_ = FileLock::try_acquire(made, /*create=*/false);
  } catch (...) {
    std::filesystem::remove(made, ignored);
    throw;
  }
  if (!lock_) {
    std::filesystem::remove(made, ignored);
    throw SystemError(fmt::format("flock of the new directory '{}' failed: held by another "
                                  "process", made.string()));
  }
  const std::string suffix = pattern.substr(pattern.size() - 6);
  const std::filesystem::path final_path =
      parent / fmt::format("{}{}-{}", prefix, ::getpid(), suffix);
  // RENAME_NOREPLACE: rename(2) would silently replace an existing empty directory.
  if (::renameat2(AT_FDCWD, made.c_str(), AT_FDCWD, final_path.c_str(), RENAME_NOREPLACE) != 0) {
    const int err = errno;
    std::filesystem::remove(made, ignored);
    throw SystemError(fmt::format("renameat2('{}', '{}') failed: {} (errno {})", made.string(),
                                  final_path.string(), std::strerror(err), err));
  }
  path_ = final_path;
}

LockedDir::~LockedDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);  // best effort; lock_ is released after
}

std::vector<std::filesystem::path> remove_unlocked_dirs(const std::filesystem::path& parent,
                                                        const std::string& prefix) {
  std::vector<std::filesystem::path> candidates;
  std::error_code ec;
  std::filesystem::directory_iterator it(parent, ec);
  if (ec) return candidates;
  const std::string hidden = hidden_prefix(prefix);
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    const bool owned = owned_name(name, prefix);
    const bool half_made = owned_name(name, hidden) && older_than_a_minute(it->path());
    if (!owned && !half_made) continue;
    std::error_code type_ec;
    if (!it->is_symlink(type_ec) && it->is_directory(type_ec) && !type_ec) {
      candidates.push_back(it->path());
    }
  }
  std::sort(candidates.begin(), candidates.end());  // deterministic order of the report
  std::vector<std::filesystem::path> removed;
  for (const auto& path : candidates) {
    std::optional<FileLock> lock;
    try {
      lock = FileLock::try_acquire(path, /*create=*/false);
    } catch (const SystemError&) {
      continue;  // unreadable: not ours to judge
    }
    if (!lock) continue;  // held: its owner lives (here, elsewhere, in another namespace)
    std::filesystem::remove_all(path, ec);
    if (!ec) removed.push_back(path);
  }
  return removed;
}

}  // namespace strata
