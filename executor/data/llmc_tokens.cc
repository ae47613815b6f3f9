// llm.c token files (see llmc_tokens.h).
#include "executor/data/llmc_tokens.h"

#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata::data {

LlmcTokens open_llmc(const std::string& path, const std::string& flag) {
  LlmcTokens t;
  t.file = MappedFile(path, flag);
  const auto bad = [&](const std::string& what) {
    return ConfigError(fmt::format("{}: '{}' is not a valid llm.c token file: {}", flag, path, what));
  };
  if (t.file.size() < kLlmcHeaderBytes) {
    throw bad(fmt::format("{} bytes, shorter than the {}-byte header", t.file.size(), kLlmcHeaderBytes));
  }
  std::int32_t header[3];
  std::memcpy(header, t.file.data(), sizeof header);
  std::int32_t want_version = 0;
  if (header[0] == kLlmcGpt2Magic) {
    t.type = TokenType::kU16;
    want_version = 1;
  } else if (header[0] == kLlmcLlama3Magic) {
    t.type = TokenType::kU32;
    want_version = 7;
  } else {
    throw bad(fmt::format("magic {}, expected {} (GPT-2 tokens) or {} (Llama 3 tokens); "
                          "--data-format bytes trains on a file's raw bytes", header[0],
                          kLlmcGpt2Magic, kLlmcLlama3Magic));
  }
  if (header[1] != want_version) {
    throw bad(fmt::format("version {} with magic {}, expected {}", header[1], header[0], want_version));
  }
  if (header[2] < 0) throw bad(fmt::format("token count {}", header[2]));
  t.count = header[2];
  const std::int64_t want = kLlmcHeaderBytes + t.count * token_bytes(t.type);
  if (t.file.size() != want) {
    throw bad(fmt::format("{} bytes, but {} {} tokens need {} (1024 + {} x {})", t.file.size(),
                          t.count, to_string(t.type), want, t.count, token_bytes(t.type)));
  }
  return t;
}

bool looks_like_llmc(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::int32_t magic = 0;
  in.read(reinterpret_cast<char*>(&magic), sizeof magic);
  return in && (magic == kLlmcGpt2Magic || magic == kLlmcLlama3Magic);
}

}  // namespace strata::data
