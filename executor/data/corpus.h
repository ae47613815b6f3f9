// Training text for the executor, as bytes (tokens = bytes, vocabulary 256): a file read
// whole (`strata run --data FILE`), or a built-in corpus of pseudo-English generated from a
// seed (no download, identical on every rank and every run). Deliberately not here: BPE or
// any other tokenizer, streaming of files larger than memory, shuffling (see batch.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::data {

// The bytes of `path`. ConfigError naming the flag and the path when it cannot be read or
// holds fewer than min_bytes bytes (a training window needs seq_len + 1).
std::vector<std::uint8_t> load_byte_file(const std::string& path, std::int64_t min_bytes,
                                         const std::string& flag = "--data");

// Checks `path` is a readable regular file with at least min_bytes bytes, without reading it
// (validation before any rank starts). ConfigError otherwise.
void check_byte_file(const std::string& path, std::int64_t min_bytes,
                     const std::string& flag = "--data");

// `bytes` bytes of pseudo-English: sentences of words drawn with Zipf-like frequencies from a
// lexicon of syllable-built words, all derived from `seed` (deterministic).
std::vector<std::uint8_t> generated_corpus(std::uint64_t seed, std::int64_t bytes);

// The default corpus size: 1 MiB, far more windows than a test run draws.
inline constexpr std::int64_t kGeneratedCorpusBytes = 1 << 20;

}  // namespace strata::data
