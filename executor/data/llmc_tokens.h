// llm.c's token files (../shared/reference/formats.md): a header of 256 int32 (magic,
// version, token count, zeros) then the tokens: GPT-2 (magic 20240520, version 1, uint16)
// or Llama 3 (magic 20240801, version 7, uint32). Checked on open: the length, the magic,
// the version of that magic, and the file size against 1024 + count x token bytes; each a
// ConfigError naming the file and what was found and expected.
#pragma once

#include <cstdint>
#include <string>

#include "executor/data/mapped_file.h"
#include "executor/data/token_view.h"

namespace strata::data {

inline constexpr std::int32_t kLlmcGpt2Magic = 20240520;
inline constexpr std::int32_t kLlmcLlama3Magic = 20240801;
inline constexpr std::int64_t kLlmcHeaderBytes = 256 * 4;

struct LlmcTokens {
  MappedFile file;
  TokenType type = TokenType::kU16;
  std::int64_t count = 0;
  TokenView tokens() const { return TokenView{file.data() + kLlmcHeaderBytes, count, type}; }
};

LlmcTokens open_llmc(const std::string& path, const std::string& flag);

// True when the file starts with either llm.c magic (format detection).
bool looks_like_llmc(const std::string& path);

}  // namespace strata::data
