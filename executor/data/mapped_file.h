// A read-only memory map of a whole file (RAII, move-only): the token files are read in
// place, shared by every rank on a node through the page cache, never copied whole.
// Deliberately not here: what the bytes mean (the format readers).
#pragma once

#include <cstdint>
#include <string>

namespace strata::data {

class MappedFile {
 public:
  MappedFile() = default;
  // ConfigError naming `flag` and the path when it is missing or not a regular file;
  // SystemError when open or mmap fails. An empty file maps to size 0 and data nullptr.
  MappedFile(const std::string& path, const std::string& flag);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset();
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::int64_t size_ = 0;
};

}  // namespace strata::data
