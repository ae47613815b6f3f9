// Token files and weights files: Megatron .bin/.idx written and read back in every dtype
// code, llm.c's two forms, format detection, the validation split, the vocabulary check,
// every corrupted-file case as a ConfigError naming the file and the problem; the sampler
// reading the same windows whatever the element type; safetensors written and read back
// (F32, F16, BF16 values) and its corrupted headers.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cost_model/specs/errors.h"
#include "executor/data/batch.h"
#include "executor/data/dataset.h"
#include "executor/data/llmc_tokens.h"
#include "executor/data/megatron_index.h"
#include "executor/weights/safetensors.h"
#include "tests/cost_model/spec_test_util.h"

namespace strata::data {
namespace {
namespace fs = std::filesystem;
using strata::testing::expect_error;

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("strata_data_formats_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

std::vector<char> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void write_all(const fs::path& p, const std::vector<char>& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
template <class T>
void poke(std::vector<char>& bytes, std::size_t at, T value) {
  std::memcpy(bytes.data() + at, &value, sizeof value);
}

// Two documents, tokens 0..6 then 100..103 (every type can hold them).
const std::vector<std::vector<std::int64_t>> kDocs = {{0, 1, 2, 3, 4, 5, 6}, {100, 101, 102, 103}};

TEST(Megatron, EveryDtypeCodeRoundTrips) {
  for (int code = 1; code <= 8; ++code) {
    const TokenType type = megatron_token_type(code);
    const std::string prefix = scratch("doc" + std::to_string(code)).string();
    write_megatron(prefix, kDocs, type);
    const MegatronDataset ds = open_megatron(prefix, "--data");
    EXPECT_EQ(ds.type, type) << code;
    EXPECT_EQ(ds.sequences, 2);
    EXPECT_EQ(ds.documents, 2);
    // .idx: 34-byte header + 2 x (4 + 8) + 3 x 8 = 82 bytes; .bin: 11 tokens.
    EXPECT_EQ(fs::file_size(prefix + ".idx"), 82u);
    EXPECT_EQ(static_cast<std::int64_t>(fs::file_size(prefix + ".bin")), 11 * token_bytes(type));
    std::vector<std::int32_t> got(11);
    ds.tokens().read(0, 11, got.data());
    EXPECT_EQ(got, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 100, 101, 102, 103})) << code;
  }
}

TEST(Megatron, CorruptFilesNameTheFileAndTheProblem) {
  const std::string prefix = scratch("good").string();
  write_megatron(prefix, kDocs, TokenType::kU16);
  const auto idx = read_all(prefix + ".idx");
  const auto bin = read_all(prefix + ".bin");
  const std::string bad = scratch("bad").string();
  const auto with = [&](std::vector<char> i, std::vector<char> b) {
    write_all(bad + ".idx", i);
    write_all(bad + ".bin", b);
  };
  auto i = idx;
  i[0] = 'X';
  with(i, bin);
  expect_error<ConfigError>([&] { open_megatron(bad, "--data"); }, {bad + ".idx", "bad magic"});
  i = idx;
  poke<std::uint64_t>(i, 9, 2);
  with(i, bin);
  expect_error<ConfigError>([&] { open_megatron(bad, "--data"); }, {bad + ".idx", "version 2, expected 1"});
  i = idx;
  i[17] = 9;
  with(i, bin);
  expect_error<ConfigError>([&] { open_megatron(bad, "--data"); }, {"dtype code 9", "expected 1-8"});
  // Truncated .bin: the second sequence (bytes [14, 22)) runs past its 20 bytes.
  with(idx, std::vector<char>(bin.begin(), bin.end() - 2));
  expect_error<ConfigError>([&] { open_megatron(bad, "--data"); },
                            {bad + ".bin", "sequence 1 spans bytes [14, 22)", "file has 20 bytes"});
  // An offset past the end: sequence 1's offset (at 34 + 2*4 + 8) moved to byte 1000.
  i = idx;
  poke<std::int64_t>(i, 34 + 8 + 8, 1000);
  with(i, bin);
  expect_error<ConfigError>([&] { open_megatron(bad, "--data"); }, {"sequence 1 spans bytes [1000, 1008)"});
  // Extra bytes after the last sequence.
  auto longer = bin;
  longer.push_back(0);
  longer.push_back(0);
  with(idx, longer);
  expect_error<ConfigError>([&] { open_megatron(bad, "--data"); }, {"has 24 bytes but its index describes 22"});
  // A document index that does not end at S.
  i = idx;
  poke<std::int64_t>(i, 34 + 24 + 16, 1);
  with(i, bin);
  expect_error<ConfigError>([&] { open_megatron(bad, "--data"); }, {"ends at 1, expected S = 2"});
  // An .idx cut short.
  with(std::vector<char>(idx.begin(), idx.end() - 8), bin);
  expect_error<ConfigError>([&] { open_megatron(bad, "--data"); }, {"74 bytes", "need 82"});
  expect_error<ConfigError>([&] { open_megatron(scratch("absent").string(), "--data"); }, {"absent.idx"});
}

void write_llmc(const fs::path& p, std::int32_t magic, std::int32_t version, const std::vector<std::uint32_t>& tokens,
                int width) {
  std::vector<char> bytes(1024 + tokens.size() * static_cast<std::size_t>(width));
  poke(bytes, 0, magic);
  poke(bytes, 4, version);
  poke(bytes, 8, static_cast<std::int32_t>(tokens.size()));
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    if (width == 2) poke(bytes, 1024 + 2 * k, static_cast<std::uint16_t>(tokens[k]));
    else poke(bytes, 1024 + 4 * k, tokens[k]);
  }
  write_all(p, bytes);
}

TEST(Llmc, Gpt2AndLlama3FormsAndTheirErrors) {
  const fs::path gpt2 = scratch("gpt2.bin"), llama = scratch("llama.bin");
  write_llmc(gpt2, kLlmcGpt2Magic, 1, {5, 50256, 7}, 2);
  write_llmc(llama, kLlmcLlama3Magic, 7, {128000, 1, 2, 3}, 4);
  const Dataset a = Dataset::open(gpt2.string(), DataFormat::kAuto, "--data");  // *.bin: llm.c
  EXPECT_EQ(a.format(), DataFormat::kLlmc);
  std::vector<std::int32_t> got(3);
  a.tokens().read(0, 3, got.data());
  EXPECT_EQ(got, (std::vector<std::int32_t>{5, 50256, 7}));
  const Dataset b = Dataset::open(llama.string(), DataFormat::kLlmc, "--data");
  EXPECT_EQ(b.tokens().type, TokenType::kU32);
  EXPECT_EQ(b.tokens().count, 4);
  const fs::path bad = scratch("bad.bin");
  write_llmc(bad, 12345, 1, {1, 2}, 2);
  expect_error<ConfigError>([&] { open_llmc(bad.string(), "--data"); },
                            {bad.string(), "magic 12345", "20240520", "20240801", "--data-format bytes"});
  write_llmc(bad, kLlmcGpt2Magic, 7, {1, 2}, 2);
  expect_error<ConfigError>([&] { open_llmc(bad.string(), "--data"); }, {"version 7", "expected 1"});
  write_llmc(bad, kLlmcGpt2Magic, 1, {1, 2}, 2);
  fs::resize_file(bad, 1024 + 3);  // 2 uint16 tokens need 1028 bytes
  expect_error<ConfigError>([&] { open_llmc(bad.string(), "--data"); }, {"1027 bytes", "need 1028"});
}

TEST(Dataset, DetectionSplitAndVocabularyCheck) {
  const std::string prefix = scratch("detect").string();
  write_megatron(prefix, kDocs, TokenType::kU16);
  EXPECT_EQ(Dataset::open(prefix, DataFormat::kAuto, "--data").format(), DataFormat::kMegatron);
  EXPECT_EQ(Dataset::open(prefix + ".bin", DataFormat::kAuto, "--data").format(), DataFormat::kMegatron);
  const fs::path text = scratch("plain.txt");
  std::ofstream(text) << "hello";
  const Dataset t = Dataset::open(text.string(), DataFormat::kAuto, "--data");
  EXPECT_EQ(t.format(), DataFormat::kBytes);
  EXPECT_EQ(t.tokens().count, 5);
  // 11 tokens, 0.3 held out: floor(3.3) = 3 validate, 8 train.
  const Dataset held = Dataset::open(prefix, DataFormat::kMegatron, "--data");  // owns the mapping
  const TokenSplit s = split_tokens(held.tokens(), 0.3);
  EXPECT_EQ(s.train.count, 8);
  EXPECT_EQ(s.valid.count, 3);
  std::int32_t first = 0;
  s.valid.read(0, 1, &first);
  EXPECT_EQ(first, 101);  // tokens 8.. of 0..6, 100..103
  // The largest id is 103: vocab 104 passes, vocab 103 names token 10 (id 103).
  const TokenView all = held.tokens();
  check_tokens(all, 104, 4, "--data 'x'", "m.json");
  expect_error<ConfigError>([&] { check_tokens(all, 103, 4, "--data 'x'", "m.json"); },
                            {"--data 'x'", "token 10 has id 103", "[0, 103)", "m.json"});
  expect_error<ConfigError>([&] { check_tokens(all, 104, 11, "--data 'x'", "m.json"); },
                            {"11 tokens", "at least 12"});
  const float floats[3] = {1.0f, 2.5f, 3.0f};
  EXPECT_EQ(find_bad_token(TokenView{floats, 3, TokenType::kF32}, 10).index, 1);  // 2.5 is not an id
  const std::int16_t negative[2] = {4, -1};
  EXPECT_EQ(find_bad_token(TokenView{negative, 2, TokenType::kI16}, 10).index, 1);
}

TEST(Batches, TheElementTypeDoesNotChangeTheWindows) {
  std::vector<std::uint8_t> bytes(5000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>((i * 7 + i / 13) % 251);
  std::vector<std::uint16_t> wide(bytes.begin(), bytes.end());
  const BatchSampler narrow_s(bytes, 3, 32);
  const BatchSampler wide_s(TokenView{wide.data(), 5000, TokenType::kU16}, 3, 32);
  const BatchSampler other(TokenView::of_bytes(bytes), 3, 32, SampleStream::kValidation);
  std::vector<std::int32_t> a(8 * 32), b(8 * 32), ta(8 * 32), tb(8 * 32), c(8 * 32), tc(8 * 32);
  narrow_s.micro_batch(2, 8, 1, 0, 0, 8, a.data(), ta.data());
  wide_s.micro_batch(2, 8, 1, 0, 0, 8, b.data(), tb.data());
  other.micro_batch(2, 8, 1, 0, 0, 8, c.data(), tc.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(ta, tb);
  EXPECT_NE(a, c);  // the validation stream draws other windows
}

}  // namespace
}  // namespace strata::data

namespace strata::weights {
namespace {
using strata::testing::expect_error;

TEST(Safetensors, WrittenFilesReadBackAndBadHeadersAreNamed) {
  const auto dir = std::filesystem::temp_directory_path() / ("strata_st_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "w.safetensors").string();
  {
    SafetensorsWriter w(path);
    w.declare("a", {2, 3});
    w.declare("b", {2});
    w.begin({{"format", "pt"}});
    const float a[6] = {1, 2, 3, 4, 5, 6}, b[2] = {-1.5f, 0.25f};
    w.write("b", b);
    w.write("a", a);
    w.finish();
  }
  const SafetensorsFile f(path, "--init-from");
  ASSERT_NE(f.find("a"), nullptr);
  EXPECT_EQ(f.find("a")->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(f.value(*f.find("a"), 5), 6.0f);
  EXPECT_EQ(f.value(*f.find("b"), 0), -1.5f);
  // The header is padded to 8 bytes: the data buffer starts at 8 + N, N % 8 == 0.
  std::ifstream in(path, std::ios::binary);
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(std::filesystem::file_size(path), 8 + n + 32);  // 8 floats

  // Half precision: F16 0x3C00 = 1.0, 0xC000 = -2.0, 0x0001 = 2^-24; BF16 0x4049 = 3.140625.
  const auto raw = [&](const std::string& header, const std::vector<std::uint16_t>& data) {
    std::string h = header;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    const std::uint64_t len = h.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << h;
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(2 * data.size()));
  };
  raw(R"({"h":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[6,8]}})",
      {0x3C00, 0xC000, 0x0001, 0x4049});
  const SafetensorsFile g(path, "--init-from");
  EXPECT_EQ(g.value(*g.find("h"), 0), 1.0f);
  EXPECT_EQ(g.value(*g.find("h"), 1), -2.0f);
  EXPECT_EQ(g.value(*g.find("h"), 2), 0x1p-24f);
  EXPECT_EQ(g.value(*g.find("b"), 0), 3.140625f);
  raw(R"({"h":{"dtype":"F16","shape":[3],"data_offsets":[0,8]}})", {1, 2, 3, 4});
  expect_error<ConfigError>([&] { SafetensorsFile(path, "--init-from"); },
                            {path, "tensor 'h'", "hold 8 bytes", "needs 6"});
  raw(R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"g":{"dtype":"F16","shape":[2],"data_offsets":[2,6]}})",
      {1, 2, 3});
  expect_error<ConfigError>([&] { SafetensorsFile(path, "--init-from"); }, {"overlap"});
  raw(R"({"h":{"dtype":"Q7","shape":[1],"data_offsets":[0,2]}})", {1});
  expect_error<ConfigError>([&] { SafetensorsFile(path, "--init-from"); }, {"dtype \"Q7\""});
  raw("not json", {});
  expect_error<ConfigError>([&] { SafetensorsFile(path, "--init-from"); }, {"not JSON"});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::weights
