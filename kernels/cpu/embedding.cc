// Vocab-parallel token + position embedding (see embedding.h).
#include "kernels/cpu/embedding.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/arg_checks.h"

namespace strata::kernels::cpu {
namespace {

void check_common(const char* kernel, const std::int32_t* tokens, int B, int T, int C,
                  int vocab_start, int vocab_end) {
  detail::require_tensor(kernel, "tokens", tokens);
  detail::require_positive(kernel, "B", B);
  detail::require_positive(kernel, "T", T);
  detail::require_positive(kernel, "C", C);
  detail::require_non_negative(kernel, "vocab_start", vocab_start);
  if (vocab_end <= vocab_start) {
    throw KernelError(fmt::format("{}: vocab slice [{}, {}) is empty; expected start < end",
                                  kernel, vocab_start, vocab_end));
  }
  const std::int64_t BT = static_cast<std::int64_t>(B) * T;
  for (std::int64_t i = 0; i < BT; ++i) {
    if (tokens[i] < 0) {
      throw KernelError(fmt::format("{}: tokens[{}] = {}; expected >= 0", kernel, i, tokens[i]));
    }
  }
}

}  // namespace

void embedding_forward(float* out, const std::int32_t* tokens, const float* wte,
                       const float* wpe, int B, int T, int C, int vocab_start, int vocab_end) {
  constexpr const char* kName = "embedding_forward";
  detail::require_tensor(kName, "out", out);
  detail::require_tensor(kName, "wte", wte);
  check_common(kName, tokens, B, T, C, vocab_start, vocab_end);
  const std::int64_t BT = static_cast<std::int64_t>(B) * T;
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < BT; ++i) {
    float* o = out + i * C;
    const int tok = tokens[i];
    if (tok >= vocab_start && tok < vocab_end) {
      const float* e = wte + static_cast<std::int64_t>(tok - vocab_start) * C;
      for (int c = 0; c < C; ++c) o[c] = e[c];
    } else {
      for (int c = 0; c < C; ++c) o[c] = 0.0f;  // another rank holds this token's row
    }
    if (wpe != nullptr) {
      const float* p = wpe + (i % T) * C;
      for (int c = 0; c < C; ++c) o[c] += p[c];
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout,
                        const std::int32_t* tokens, int B, int T, int C, int vocab_start,
                        int vocab_end) {
  constexpr const char* kName = "embedding_backward";
  detail::require_tensor(kName, "dout", dout);
  check_common(kName, tokens, B, T, C, vocab_start, vocab_end);
  const std::int64_t BT = static_cast<std::int64_t>(B) * T;
  // Threads own column blocks of C and walk positions in order, so repeated tokens add up
  // in the same order for any thread count (no atomics).
  constexpr int kBlock = 64;
  const int blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * kBlock;
    const int c1 = std::min(C, c0 + kBlock);
    for (std::int64_t i = 0; i < BT; ++i) {
      const float* g = dout + i * C;
      const int tok = tokens[i];
      if (dwte != nullptr && tok >= vocab_start && tok < vocab_end) {
        float* d = dwte + static_cast<std::int64_t>(tok - vocab_start) * C;
        for (int c = c0; c < c1; ++c) d[c] += g[c];
      }
      if (dwpe != nullptr) {
        float* d = dwpe + (i % T) * C;
        for (int c = c0; c < c1; ++c) d[c] += g[c];
      }
    }
  }
}

}  // namespace strata::kernels::cpu
