// safetensors reading and writing (see safetensors.h).
#include "executor/weights/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"

namespace strata::weights {
namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the format's limit

std::int64_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t mant = h & 0x3FFu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

std::int64_t TensorEntry::elements() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

bool SafetensorsFile::readable_dtype(const std::string& dtype) {
  return dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "F64";
}

SafetensorsFile::SafetensorsFile(const std::string& path, const std::string& flag)
    : file_(path, flag) {
  const auto bad = [&](const std::string& what) {
    return ConfigError(fmt::format("{}: '{}' is not a valid safetensors file: {}", flag, path, what));
  };
  if (file_.size() < 8) throw bad(fmt::format("{} bytes, shorter than the 8-byte header length", file_.size()));
  std::uint64_t n = 0;
  std::memcpy(&n, file_.data(), 8);
  if (n > kMaxHeaderBytes || n > static_cast<std::uint64_t>(file_.size() - 8)) {
    throw bad(fmt::format("header length {} bytes, expected at most {} and inside the file ({} bytes)",
                          n, kMaxHeaderBytes, file_.size()));
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file_.data() + 8, file_.data() + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    throw bad(fmt::format("the header is not JSON: {}", e.what()));
  }
  if (!header.is_object()) throw bad("the header is not a JSON object");
  buffer_ = file_.data() + 8 + n;
  const std::int64_t buffer_bytes = file_.size() - 8 - static_cast<std::int64_t>(n);
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      // The format's metadata is a map of strings; anything else is not ours to read.
      if (!it.value().is_object()) throw bad("\"__metadata__\" is not a JSON object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const auto& v = it.value();
    const auto field = [&](const char* key) -> const nlohmann::json& {
      if (!v.is_object() || !v.contains(key)) throw bad(fmt::format("tensor '{}' has no \"{}\"", it.key(), key));
      return v.at(key);
    };
    TensorEntry t;
    t.name = it.key();
    const auto& dtype = field("dtype");
    if (!dtype.is_string() || dtype_bytes(dtype.get<std::string>()) == 0) {
      throw bad(fmt::format("tensor '{}': dtype {} is not a safetensors dtype", t.name, dtype.dump()));
    }
    t.dtype = dtype.get<std::string>();
    const auto& shape = field("shape");
    if (!shape.is_array()) throw bad(fmt::format("tensor '{}': shape {} is not an array", t.name, shape.dump()));
    for (const auto& d : shape) {
      if (!d.is_number_integer() || d.get<std::int64_t>() < 0) {
        throw bad(fmt::format("tensor '{}': shape {} is not a list of sizes >= 0", t.name, shape.dump()));
      }
      t.shape.push_back(d.get<std::int64_t>());
    }
    const auto& offsets = field("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_integer() ||
        !offsets[1].is_number_integer()) {
      throw bad(fmt::format("tensor '{}': data_offsets {} is not [begin, end]", t.name, offsets.dump()));
    }
    t.begin = offsets[0].get<std::int64_t>();
    t.end = offsets[1].get<std::int64_t>();
    if (t.begin < 0 || t.end < t.begin || t.end > buffer_bytes) {
      throw bad(fmt::format("tensor '{}': data_offsets [{}, {}] outside the {}-byte data buffer",
                            t.name, t.begin, t.end, buffer_bytes));
    }
    if (t.end - t.begin != t.elements() * dtype_bytes(t.dtype)) {
      throw bad(fmt::format("tensor '{}': data_offsets [{}, {}] hold {} bytes, but shape {} of {} needs {}",
                            t.name, t.begin, t.end, t.end - t.begin, shape.dump(), t.dtype,
                            t.elements() * dtype_bytes(t.dtype)));
    }
    index_[t.name] = entries_.size();
    entries_.push_back(std::move(t));
  }
  std::vector<const TensorEntry*> by_offset;
  for (const auto& t : entries_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorEntry* a, const TensorEntry* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      throw bad(fmt::format("tensors '{}' and '{}' overlap", by_offset[i - 1]->name, by_offset[i]->name));
    }
  }
}

const TensorEntry* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

float SafetensorsFile::value(const TensorEntry& t, std::int64_t index) const {
  const std::uint8_t* p = buffer_ + t.begin;
  if (t.dtype == "F32") {
    float f;
    std::memcpy(&f, p + 4 * index, 4);
    return f;
  }
  if (t.dtype == "BF16") {
    std::uint16_t h;
    std::memcpy(&h, p + 2 * index, 2);
    const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  if (t.dtype == "F16") {
    std::uint16_t h;
    std::memcpy(&h, p + 2 * index, 2);
    return half_to_float(h);
  }
  if (t.dtype == "F64") {
    double d;
    std::memcpy(&d, p + 8 * index, 8);
    return static_cast<float>(d);
  }
  throw std::logic_error("SafetensorsFile::value: dtype " + t.dtype);
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) std::remove(tmp_.c_str());
}

void SafetensorsWriter::declare(const std::string& name, std::vector<std::int64_t> shape) {
  TensorEntry t;
  t.name = name;
  t.dtype = "F32";
  t.shape = std::move(shape);
  t.begin = entries_.empty() ? 0 : entries_.back().end;
  t.end = t.begin + 4 * t.elements();
  index_[name] = entries_.size();
  entries_.push_back(std::move(t));
}

void SafetensorsWriter::begin(const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (const auto& t : entries_) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data buffer starts 8-byte aligned
  tmp_ = path_ + ".tmp";
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    tmp_.clear();
    throw ConfigError(fmt::format("--save-weights: cannot create '{}': {}", path_, std::strerror(errno)));
  }
  const std::uint64_t n = text.size();
  data_start_ = 8 + static_cast<std::int64_t>(n);
  const std::int64_t total = data_start_ + (entries_.empty() ? 0 : entries_.back().end);
  if (::pwrite(fd_, &n, 8, 0) != 8 ||
      ::pwrite(fd_, text.data(), text.size(), 8) != static_cast<ssize_t>(text.size()) ||
      ::ftruncate(fd_, total) != 0) {
    throw SystemError(fmt::format("writing the header of '{}': {}", tmp_, std::strerror(errno)));
  }
}

void SafetensorsWriter::write(const std::string& name, const float* data) {
  const TensorEntry& t = entries_.at(index_.at(name));
  const auto* p = reinterpret_cast<const char*>(data);
  std::int64_t done = 0;
  const std::int64_t bytes = t.end - t.begin;
  while (done < bytes) {
    const ssize_t w = ::pwrite(fd_, p + done, static_cast<std::size_t>(bytes - done), data_start_ + t.begin + done);
    if (w <= 0) throw SystemError(fmt::format("writing tensor '{}' to '{}': {}", name, tmp_, std::strerror(errno)));
    done += w;
  }
}

void SafetensorsWriter::finish() {
  if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
    fd_ = -1;
    throw SystemError(fmt::format("closing '{}': {}", tmp_, std::strerror(errno)));
  }
  fd_ = -1;
  std::filesystem::rename(tmp_, path_);
  tmp_.clear();
}

}  // namespace strata::weights
