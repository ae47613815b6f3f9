#include "tools/strata/out_dir.h"

#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <optional>
#include <system_error>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata::cli {
namespace fs = std::filesystem;

void check_out_dir(const std::string& out, const char* flag) {
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out)) {
    throw ConfigError(fmt::format("{}: cannot create directory '{}': {}", flag, out,
                                  ec ? ec.message() : "a file of that name exists"));
  }
  if (::access(out.c_str(), W_OK | X_OK) != 0) {
    throw ConfigError(fmt::format("{}: directory '{}' is not writable: {}", flag, out,
                                  std::error_code(errno, std::generic_category()).message()));
  }
}

FileLock lock_out_dir(const std::string& out) {
  check_out_dir(out);
  const fs::path lock_path = fs::path(out) / ".strata.lock";
  std::optional<FileLock> lock = FileLock::try_acquire(lock_path, /*create=*/true);
  if (!lock) {
    throw ConfigError(fmt::format("--out: directory '{}' is in use by another strata run (it "
                                  "holds {}); wait for it to end or choose another --out",
                                  out, lock_path.string()));
  }
  return std::move(*lock);
}

}  // namespace strata::cli
