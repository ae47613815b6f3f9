// Data: the generated corpus is deterministic per seed, batches depend only on (seed, step,
// sequence) so every DP/micro-batch split reads the same global batch, and a missing or too
// short --data file is a ConfigError naming the flag and the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "cost_model/specs/errors.h"
#include "executor/data/batch.h"
#include "executor/data/corpus.h"

namespace strata::data {
namespace {

TEST(Corpus, GeneratedIsDeterministicPerSeedAndTextLike) {
  const auto a = generated_corpus(5, 1 << 14);
  const auto b = generated_corpus(5, 1 << 14);
  const auto c = generated_corpus(6, 1 << 14);
  ASSERT_EQ(a.size(), 1u << 14);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Printable text: letters, space, comma, period, question mark, newline only.
  std::set<std::uint8_t> symbols(a.begin(), a.end());
  for (const std::uint8_t s : symbols) {
    EXPECT_TRUE(std::isalpha(s) || s == ' ' || s == ',' || s == '.' || s == '?' || s == '\n') << int(s);
  }
  // Spaces separate words of a few letters: between 1/10 and 1/3 of the bytes.
  const auto spaces = std::count(a.begin(), a.end(), ' ');
  EXPECT_GT(spaces, static_cast<long>(a.size() / 10));
  EXPECT_LT(spaces, static_cast<long>(a.size() / 3));
}

TEST(Batches, EverySplitReadsTheSameGlobalBatch) {
  const auto corpus = generated_corpus(1, 1 << 14);
  const BatchSampler sampler(corpus, 1, 16);
  const std::int64_t B = 8, T = 16;
  std::vector<std::int32_t> whole_in(B * T), whole_tg(B * T);
  sampler.micro_batch(3, B, 1, 0, 0, B, whole_in.data(), whole_tg.data());
  // d = 2, b = 2: DP rank r's micro-batch j is sequences r * 4 + j * 2 + [0, 2).
  for (std::int64_t r = 0; r < 2; ++r) {
    for (std::int64_t j = 0; j < 2; ++j) {
      std::vector<std::int32_t> in(2 * T), tg(2 * T);
      sampler.micro_batch(3, B, 2, r, j, 2, in.data(), tg.data());
      const std::int64_t first = r * 4 + j * 2;
      for (std::int64_t i = 0; i < 2 * T; ++i) {
        EXPECT_EQ(in[i], whole_in[first * T + i]);
        EXPECT_EQ(tg[i], whole_tg[first * T + i]);
      }
    }
  }
  // Targets are the inputs shifted by one token.
  for (std::int64_t i = 0; i + 1 < T; ++i) EXPECT_EQ(whole_tg[i], whole_in[i + 1]);
  // Another step draws other windows.
  std::vector<std::int32_t> next_in(B * T), next_tg(B * T);
  sampler.micro_batch(4, B, 1, 0, 0, B, next_in.data(), next_tg.data());
  EXPECT_NE(next_in, whole_in);
}

TEST(Corpus, BadFilesAreConfigErrors) {
  EXPECT_THROW(load_byte_file("/no/such/file", 10), ConfigError);
  const auto path = std::filesystem::temp_directory_path() / "strata_data_test_short.txt";
  { std::ofstream(path) << "abc"; }
  try {
    load_byte_file(path.string(), 65);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--data"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("3 bytes"), std::string::npos);
  }
  const auto bytes = load_byte_file(path.string(), 3);
  EXPECT_EQ(bytes, (std::vector<std::uint8_t>{'a', 'b', 'c'}));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace strata::data
