// Byte corpora: a file, or generated pseudo-English (see corpus.h).
#include "executor/data/corpus.h"

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <system_error>

#include "cost_model/specs/errors.h"
#include "executor/model/param_init.h"

namespace strata::data {
namespace fs = std::filesystem;

void check_byte_file(const std::string& path, std::int64_t min_bytes, const std::string& flag) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw ConfigError(fmt::format("{}: file '{}' does not exist or is not a regular file", flag,
                                  path));
  }
  const auto size = static_cast<std::int64_t>(fs::file_size(path, ec));
  if (ec) {
    throw ConfigError(fmt::format("{}: cannot read the size of '{}': {}", flag, path, ec.message()));
  }
  if (size < min_bytes) {
    throw ConfigError(fmt::format("{}: file '{}' has {} bytes; expected at least {} (seq_len + 1)",
                                  flag, path, size, min_bytes));
  }
}

std::vector<std::uint8_t> load_byte_file(const std::string& path, std::int64_t min_bytes,
                                         const std::string& flag) {
  check_byte_file(path, min_bytes, flag);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError(fmt::format("{}: cannot open '{}': {}", flag, path, std::strerror(errno)));
  }
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(fs::file_size(path)));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (in.gcount() != static_cast<std::streamsize>(bytes.size())) {
    throw ConfigError(fmt::format("{}: short read of '{}' ({} of {} bytes)", flag, path,
                                  in.gcount(), bytes.size()));
  }
  return bytes;
}

namespace {

// A counter-based stream: draw i of (seed, purpose) is uniform_at(key, i).
class Draws {
 public:
  Draws(std::uint64_t seed, int purpose) : key_(model::tensor_key(seed, 1000 + purpose, 0)) {}
  double uniform() { return model::uniform_at(key_, next_++); }
  std::int64_t below(std::int64_t n) {
    return static_cast<std::int64_t>(uniform() * static_cast<double>(n));
  }

 private:
  std::uint64_t key_;
  std::int64_t next_ = 0;
};

constexpr std::array<std::string_view, 20> kOnsets = {
    "b", "c", "d", "f", "g", "h", "l", "m", "n", "p", "r", "s", "t", "w", "th", "st", "br", "ch",
    "sh", ""};
constexpr std::array<std::string_view, 8> kVowels = {"a", "e", "i", "o", "u", "ea", "ou", "ai"};
constexpr std::array<std::string_view, 10> kCodas = {"", "", "n", "r", "s", "t", "nd", "ll",
                                                     "ng", "st"};
constexpr std::int64_t kLexiconWords = 600;

}  // namespace

std::vector<std::uint8_t> generated_corpus(std::uint64_t seed, std::int64_t bytes) {
  Draws lex(seed, 0);
  std::vector<std::string> lexicon;
  lexicon.reserve(kLexiconWords);
  // Short words first: with Zipf-like picks below the most frequent words are the shortest,
  // as in English.
  for (std::int64_t i = 0; i < kLexiconWords; ++i) {
    const std::int64_t syllables = 1 + (i >= 40) + (i >= 250) + (lex.below(4) == 0);
    std::string word;
    for (std::int64_t s = 0; s < syllables; ++s) {
      word += kOnsets[static_cast<std::size_t>(lex.below(kOnsets.size()))];
      word += kVowels[static_cast<std::size_t>(lex.below(kVowels.size()))];
      word += kCodas[static_cast<std::size_t>(lex.below(kCodas.size()))];
    }
    lexicon.push_back(word);
  }
  Draws text(seed, 1);
  std::vector<std::uint8_t> out;
  out.reserve(static_cast<std::size_t>(bytes) + 64);
  while (static_cast<std::int64_t>(out.size()) < bytes) {
    const std::int64_t words = 4 + text.below(12);
    for (std::int64_t w = 0; w < words; ++w) {
      // u^3 concentrates picks on low indices: a heavy-tailed, Zipf-like word frequency.
      const double u = text.uniform();
      std::string word = lexicon[static_cast<std::size_t>(u * u * u * kLexiconWords)];
      if (w == 0) word[0] = static_cast<char>(word[0] - 'a' + 'A');
      out.insert(out.end(), word.begin(), word.end());
      if (w + 1 < words) {
        if (text.below(9) == 0) out.push_back(',');
        out.push_back(' ');
      }
    }
    out.push_back(text.below(6) == 0 ? '?' : '.');
    out.push_back(text.below(5) == 0 ? '\n' : ' ');
  }
  out.resize(static_cast<std::size_t>(bytes));
  return out;
}

}  // namespace strata::data
