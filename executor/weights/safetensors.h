// The safetensors format (../shared/reference/formats.md), our own code: an 8-byte
// little-endian header length N, N bytes of JSON (name -> {dtype, shape, data_offsets}, an
// optional "__metadata__" map of strings), then the data buffer. Reading maps the file and
// checks everything on open: the header's length (at most 100 MB, inside the file), its
// JSON, every entry's dtype, shape and offsets (inside the buffer, end - begin = elements x
// dtype bytes, no two tensors overlapping); each a ConfigError naming the file, the tensor
// and the field. Writing declares every tensor first, then fills them in any order, and
// renames a temp file into place at the end (nothing half-written).
// Deliberately not here: what the tensors mean (gpt2_tensors.h), sharded index files.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "executor/data/mapped_file.h"

namespace strata::weights {

struct TensorEntry {
  std::string name;
  std::string dtype;                // "F32", "F16", "BF16", "F64", ...
  std::vector<std::int64_t> shape;
  std::int64_t begin = 0, end = 0;  // bytes, relative to the data buffer
  std::int64_t elements() const;
};

class SafetensorsFile {
 public:
  SafetensorsFile(const std::string& path, const std::string& flag);

  const std::vector<TensorEntry>& entries() const { return entries_; }
  const TensorEntry* find(const std::string& name) const;  // nullptr when absent
  // Element `index` of a floating-point tensor (F32, F16, BF16 or F64) as fp32.
  float value(const TensorEntry& t, std::int64_t index) const;
  // Whether value() can read tensors of this dtype.
  static bool readable_dtype(const std::string& dtype);
  const std::string& path() const { return file_.path(); }
  // The header's "__metadata__" strings (checkpoints describe each shard's slice there).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  data::MappedFile file_;
  std::map<std::string, std::string> metadata_;
  const std::uint8_t* buffer_ = nullptr;
  std::vector<TensorEntry> entries_;
  std::map<std::string, std::size_t> index_;
};

// An F32 safetensors file, written through a temp file: declare() every tensor, then
// begin() lays out the header, write() fills a tensor's bytes, finish() renames it into place.
class SafetensorsWriter {
 public:
  explicit SafetensorsWriter(std::string path) : path_(std::move(path)) {}
  ~SafetensorsWriter();  // removes the temp file unless finish() ran

  void declare(const std::string& name, std::vector<std::int64_t> shape);
  void begin(const std::map<std::string, std::string>& metadata);
  // data: the tensor's elements in row-major order, fp32.
  void write(const std::string& name, const float* data);
  void finish();

 private:
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  std::int64_t data_start_ = 0;
  std::vector<TensorEntry> entries_;
  std::map<std::string, std::size_t> index_;
};

}  // namespace strata::weights
