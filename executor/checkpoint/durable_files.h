// The few file-system steps a checkpoint needs to be complete or absent after a crash or a
// power cut: data and directory entries flushed (fsync) before the rename that publishes
// them. Every call checks its syscall and throws SystemError naming the path.
#pragma once

#include <filesystem>
#include <string>

namespace strata::checkpoint {

// fsync of a file's data, or of a directory's entries.
void fsync_path(const std::filesystem::path& path);

// Writes `text` to `path` through `path`.tmp: written, fsync'd, renamed, directory fsync'd.
void write_file_durably(const std::filesystem::path& path, const std::string& text);

// rename(2) of `from` to `to` (a directory `to` must not exist), then fsync of to's parent.
void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace strata::checkpoint
