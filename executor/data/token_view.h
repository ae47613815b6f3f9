// A non-owning view of a token stream in any of the element types the token files use
// (Megatron's eight dtype codes, llm.c's uint16 / uint32, raw bytes): what the batch sampler
// reads windows from. Tokens are converted to int32 as they are read.
// Deliberately not here: owning the memory (a Dataset or a byte vector does), file formats.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::data {

enum class TokenType { kU8, kI8, kI16, kU16, kI32, kU32, kI64, kF32, kF64 };

std::int64_t token_bytes(TokenType type);
std::string to_string(TokenType type);

struct TokenView {
  const void* data = nullptr;
  std::int64_t count = 0;
  TokenType type = TokenType::kU8;

  static TokenView of_bytes(const std::vector<std::uint8_t>& bytes) {
    return TokenView{bytes.data(), static_cast<std::int64_t>(bytes.size()), TokenType::kU8};
  }
  // Tokens [begin, end) of this view.
  TokenView slice(std::int64_t begin, std::int64_t end) const;
  // out[i] = token (start + i) for i in [0, n).
  void read(std::int64_t start, std::int64_t n, std::int32_t* out) const;
};

// The first token outside [0, vocab) (or, for float files, not a whole number), if any:
// `index` -1 when every token is valid.
struct BadToken {
  std::int64_t index = -1;
  double value = 0;
};
BadToken find_bad_token(const TokenView& tokens, std::int64_t vocab);

}  // namespace strata::data
