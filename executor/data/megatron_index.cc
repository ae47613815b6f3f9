// Megatron .bin/.idx reading, validation and writing (see megatron_index.h).
#include "executor/data/megatron_index.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr std::uint64_t kVersion = 1;
constexpr std::int64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype, S, D

template <class T>
T load(const std::uint8_t* p) {  // unaligned little-endian read (x86 and ARM are LE)
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

TokenType megatron_token_type(int code) {
  switch (code) {
    case 1: return TokenType::kU8;
    case 2: return TokenType::kI8;
    case 3: return TokenType::kI16;
    case 4: return TokenType::kI32;
    case 5: return TokenType::kI64;
    case 6: return TokenType::kF64;
    case 7: return TokenType::kF32;
    case 8: return TokenType::kU16;
    default: break;
  }
  throw std::out_of_range("megatron dtype code");
}

int megatron_dtype_code(TokenType type) {
  for (int code = 1; code <= 8; ++code) {
    if (megatron_token_type(code) == type) return code;
  }
  throw std::invalid_argument("Megatron has no dtype code for " + to_string(type));
}

TokenView MegatronDataset::tokens() const {
  return TokenView{bin.data(), bin.size() / token_bytes(type), type};
}

MegatronDataset open_megatron(const std::string& prefix, const std::string& flag) {
  const std::string idx_path = prefix + ".idx";
  const std::string bin_path = prefix + ".bin";
  const MappedFile idx(idx_path, flag);
  const auto bad = [&](const std::string& what) {
    return ConfigError(fmt::format("{}: '{}' is not a valid Megatron index: {}", flag, idx_path, what));
  };
  const std::uint8_t* p = idx.data();
  if (idx.size() < kHeaderBytes) {
    throw bad(fmt::format("{} bytes, shorter than the {}-byte header", idx.size(), kHeaderBytes));
  }
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0) {
    throw bad("bad magic (expected the 9 bytes \"MMIDIDX\\0\\0\")");
  }
  const auto version = load<std::uint64_t>(p + 9);
  if (version != kVersion) throw bad(fmt::format("version {}, expected {}", version, kVersion));
  MegatronDataset ds;
  const int code = p[17];
  try {
    ds.type = megatron_token_type(code);
  } catch (const std::out_of_range&) {
    throw bad(fmt::format("dtype code {}, expected 1-8 (1 uint8, 2 int8, 3 int16, 4 int32, "
                          "5 int64, 6 float64, 7 float32, 8 uint16)", code));
  }
  const auto S = load<std::uint64_t>(p + 18);
  const auto D = load<std::uint64_t>(p + 26);
  // int32 lengths, int64 offsets, int64 document index, then optionally int8 modes.
  const std::uint64_t limit = static_cast<std::uint64_t>(idx.size());
  if (S > limit || D > limit) throw bad(fmt::format("S = {} sequences, D = {} entries: more than the file holds", S, D));
  const std::int64_t want = kHeaderBytes + static_cast<std::int64_t>(S) * (4 + 8) +
                            static_cast<std::int64_t>(D) * 8;
  if (idx.size() != want && idx.size() != want + static_cast<std::int64_t>(S)) {
    throw bad(fmt::format("{} bytes, but S = {} sequences and D = {} document entries need {} "
                          "(or {} with modes)", idx.size(), S, D, want, want + static_cast<std::int64_t>(S)));
  }
  ds.bin = MappedFile(bin_path, flag);
  const std::int64_t tb = token_bytes(ds.type);
  const std::uint8_t* lengths = p + kHeaderBytes;
  const std::uint8_t* offsets = lengths + 4 * S;
  const std::uint8_t* doc_index = offsets + 8 * S;
  std::int64_t expected = 0;  // sequences back to back from byte 0
  for (std::uint64_t i = 0; i < S; ++i) {
    const auto len = load<std::int32_t>(lengths + 4 * i);
    const auto off = load<std::int64_t>(offsets + 8 * i);
    if (len < 0) throw bad(fmt::format("sequence {} has length {}", i, len));
    const std::int64_t end = off + static_cast<std::int64_t>(len) * tb;
    if (off < 0 || end > ds.bin.size()) {
      throw ConfigError(fmt::format(
          "{}: '{}' is truncated or does not match its index: sequence {} spans bytes [{}, {}) "
          "but the file has {} bytes", flag, bin_path, i, off, end, ds.bin.size()));
    }
    if (off != expected) {
      throw bad(fmt::format("sequence {} starts at byte {}, expected {} (sequences back to back)",
                            i, off, expected));
    }
    expected = end;
  }
  if (expected != ds.bin.size()) {
    throw ConfigError(fmt::format("{}: '{}' has {} bytes but its index describes {}", flag,
                                  bin_path, ds.bin.size(), expected));
  }
  std::int64_t previous = 0;
  for (std::uint64_t j = 0; j < D; ++j) {
    const auto first = load<std::int64_t>(doc_index + 8 * j);
    if ((j == 0 && first != 0) || first < previous || first > static_cast<std::int64_t>(S)) {
      throw bad(fmt::format("document index entry {} is {}: expected 0 first, then non-decreasing "
                            "sequence numbers up to S = {}", j, first, S));
    }
    previous = first;
  }
  if (D == 0 || previous != static_cast<std::int64_t>(S)) {
    throw bad(fmt::format("the document index ends at {}, expected S = {}", D == 0 ? -1 : previous, S));
  }
  ds.sequences = static_cast<std::int64_t>(S);
  ds.documents = static_cast<std::int64_t>(D) - 1;
  return ds;
}

namespace {

template <class T>
void put(std::ofstream& out, T v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_token(std::ofstream& out, TokenType type, std::int64_t t) {
  switch (type) {
    case TokenType::kU8: put(out, static_cast<std::uint8_t>(t)); return;
    case TokenType::kI8: put(out, static_cast<std::int8_t>(t)); return;
    case TokenType::kI16: put(out, static_cast<std::int16_t>(t)); return;
    case TokenType::kU16: put(out, static_cast<std::uint16_t>(t)); return;
    case TokenType::kI32: put(out, static_cast<std::int32_t>(t)); return;
    case TokenType::kU32: put(out, static_cast<std::uint32_t>(t)); return;
    case TokenType::kI64: put(out, t); return;
    case TokenType::kF32: put(out, static_cast<float>(t)); return;
    case TokenType::kF64: put(out, static_cast<double>(t)); return;
  }
}

void close_checked(std::ofstream& out, const std::string& path) {
  out.close();
  if (!out) throw SystemError(fmt::format("writing '{}' failed", path));
}

}  // namespace

void write_megatron(const std::string& prefix, const std::vector<std::vector<std::int64_t>>& documents,
                    TokenType type) {
  const int code = megatron_dtype_code(type);
  const std::string bin_tmp = prefix + ".bin.tmp", idx_tmp = prefix + ".idx.tmp";
  std::ofstream bin(bin_tmp, std::ios::binary | std::ios::trunc);
  std::ofstream idx(idx_tmp, std::ios::binary | std::ios::trunc);
  if (!bin || !idx) {
    std::remove(bin_tmp.c_str());
    std::remove(idx_tmp.c_str());
    throw ConfigError(fmt::format("--out: cannot write '{}.bin' / '{}.idx'", prefix, prefix));
  }
  idx.write(kMagic, sizeof kMagic);
  put(idx, kVersion);
  put(idx, static_cast<std::uint8_t>(code));
  const auto S = static_cast<std::uint64_t>(documents.size());
  put(idx, S);
  put(idx, S + 1);  // one sequence per document
  for (const auto& d : documents) put(idx, static_cast<std::int32_t>(d.size()));
  std::int64_t offset = 0;
  for (const auto& d : documents) {
    put(idx, offset);
    offset += static_cast<std::int64_t>(d.size()) * token_bytes(type);
    for (std::int64_t t : d) put_token(bin, type, t);
  }
  for (std::uint64_t i = 0; i <= S; ++i) put(idx, static_cast<std::int64_t>(i));
  close_checked(bin, bin_tmp);
  close_checked(idx, idx_tmp);
  std::filesystem::rename(bin_tmp, prefix + ".bin");
  std::filesystem::rename(idx_tmp, prefix + ".idx");
}

}  // namespace strata::data
