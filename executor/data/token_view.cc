// Typed token streams (see token_view.h).
#include "executor/data/token_view.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace strata::data {
namespace {

// Calls f with a typed pointer to the view's first token.
template <class F>
decltype(auto) visit(const TokenView& v, F&& f) {
  switch (v.type) {
    case TokenType::kU8: return f(static_cast<const std::uint8_t*>(v.data));
    case TokenType::kI8: return f(static_cast<const std::int8_t*>(v.data));
    case TokenType::kI16: return f(static_cast<const std::int16_t*>(v.data));
    case TokenType::kU16: return f(static_cast<const std::uint16_t*>(v.data));
    case TokenType::kI32: return f(static_cast<const std::int32_t*>(v.data));
    case TokenType::kU32: return f(static_cast<const std::uint32_t*>(v.data));
    case TokenType::kI64: return f(static_cast<const std::int64_t*>(v.data));
    case TokenType::kF32: return f(static_cast<const float*>(v.data));
    case TokenType::kF64: return f(static_cast<const double*>(v.data));
  }
  throw std::logic_error("TokenView: unknown token type");
}

}  // namespace

std::int64_t token_bytes(TokenType type) {
  switch (type) {
    case TokenType::kU8:
    case TokenType::kI8: return 1;
    case TokenType::kI16:
    case TokenType::kU16: return 2;
    case TokenType::kI32:
    case TokenType::kU32:
    case TokenType::kF32: return 4;
    case TokenType::kI64:
    case TokenType::kF64: return 8;
  }
  return 0;
}

std::string to_string(TokenType type) {
  switch (type) {
    case TokenType::kU8: return "uint8";
    case TokenType::kI8: return "int8";
    case TokenType::kI16: return "int16";
    case TokenType::kU16: return "uint16";
    case TokenType::kI32: return "int32";
    case TokenType::kU32: return "uint32";
    case TokenType::kI64: return "int64";
    case TokenType::kF32: return "float32";
    case TokenType::kF64: return "float64";
  }
  return "unknown";
}

TokenView TokenView::slice(std::int64_t begin, std::int64_t end) const {
  if (begin < 0 || end < begin || end > count) throw std::out_of_range("TokenView::slice");
  return TokenView{static_cast<const std::uint8_t*>(data) + begin * token_bytes(type),
                   end - begin, type};
}

void TokenView::read(std::int64_t start, std::int64_t n, std::int32_t* out) const {
  if (start < 0 || start + n > count) throw std::out_of_range("TokenView::read");
  visit(*this, [&](auto* p) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<std::int32_t>(p[start + i]);
  });
}

BadToken find_bad_token(const TokenView& tokens, std::int64_t vocab) {
  return visit(tokens, [&](auto* p) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(p)>>;
    const auto limit = static_cast<double>(vocab);
    for (std::int64_t i = 0; i < tokens.count; ++i) {
      const T x = p[i];
      bool ok;
      if constexpr (std::is_floating_point_v<T>) {
        ok = x >= 0 && static_cast<double>(x) < limit && std::floor(x) == x;
      } else if constexpr (std::is_signed_v<T>) {
        ok = x >= 0 && static_cast<double>(x) < limit;
      } else {
        ok = static_cast<double>(x) < limit;
      }
      if (!ok) return BadToken{i, static_cast<double>(x)};
    }
    return BadToken{};
  });
}

}  // namespace strata::data
