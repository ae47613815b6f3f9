// The norm check of the attention gradient tests: the CUDA kernels against their CPU twins
// (cuda_attention_test.cc, cuda_gqa_attention_test.cc) and, on the CPU, the twins against
// each other (attention_grad_metric_test.cc, which keeps this check honest without a GPU).
// dqkv is judged by parts -- q, k and v (k and v of a KV head are group sums, larger than
// q's terms: one norm over all would hide an error in q), optionally each half of the
// sequence (an absolute bound lets a kernel that writes zero dk for the second half pass) --
// by ||got_p - want_p|| / ||want_p||.
// A part whose exact gradient is zero has a reference made of rounding alone: at T = 1 each
// query sees one key, P = 1, so dS = P (dP - D) = 0 and dq = dk = 0 analytically; both
// sides' dq and dk are what is left of dP - D after summing the same products in different
// orders, ~2^-24 sqrt(HS) of the terms, so the part's ratio is noise over noise, O(1) (the
// H200's 1.91 at HS 128, T = 1, two correct kernels). Such a part carries no signal that a
// bf16 kernel can resolve, so it is judged against the whole instead: the denominator is
// max(||want_p||, kNegligiblePart ||want||), with kNegligiblePart = 2^-9, bf16's unit
// roundoff: a part whose reference is below the rounding of the whole gradient is as
// good as zero to a kernel with bf16 operands, yet an error in it as large as 1e-2 of that
// floor (2e-5 of the whole) still fails.
// Deliberately not here: the element-wise all_close bounds (grad_check.h), CUDA.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace strata::kernels::testing {

inline constexpr double kNegligiblePart = 0x1p-9;

// Columns [col_begin, col_end) of every row of dqkv, for the sequence positions
// [t_begin, t_end) of every batch element.
struct GradPart {
  std::string name;
  std::size_t col_begin = 0, col_end = 0;
  int t_begin = 0, t_end = 0;
};

// q (q_width columns), k and v (kv_width each); by_half: each also split into positions
// [0, T/2) and [T/2, T) (at T = 1 the first half is empty and left out).
inline std::vector<GradPart> qkv_parts(int T, std::size_t q_width, std::size_t kv_width,
                                       bool by_half) {
  const std::size_t begin[] = {0, q_width, q_width + kv_width};
  const std::size_t end[] = {q_width, q_width + kv_width, q_width + 2 * kv_width};
  const char* names[] = {"dq", "dk", "dv"};
  std::vector<GradPart> parts;
  for (int p = 0; p < 3; ++p) {
    if (!by_half) {
      parts.push_back({names[p], begin[p], end[p], 0, T});
      continue;
    }
    if (T / 2 > 0) parts.push_back({std::string(names[p]) + " first half", begin[p], end[p], 0, T / 2});
    parts.push_back({std::string(names[p]) + " second half", begin[p], end[p], T / 2, T});
  }
  return parts;
}

struct PartNorms {
  double diff = 0, ref = 0;  // ||got_p - want_p||^2 and ||want_p||^2
};

inline PartNorms part_norms(const std::vector<float>& got, const std::vector<float>& want, int B,
                            int T, std::size_t width, const GradPart& part) {
  PartNorms n;
  for (int b = 0; b < B; ++b) {
    for (int t = part.t_begin; t < part.t_end; ++t) {
      const std::size_t row = (static_cast<std::size_t>(b) * T + t) * width;
      for (std::size_t c = part.col_begin; c < part.col_end; ++c) {
        const double d = static_cast<double>(got[row + c]) - want[row + c];
        n.diff += d * d;
        n.ref += static_cast<double>(want[row + c]) * want[row + c];
      }
    }
  }
  return n;
}

// The worst part's ||got_p - want_p|| / max(||want_p||, kNegligiblePart ||want||); `which`
// (optional) gets its name. got and want: (B, T, width).
inline double worst_part_relative_norm(const std::vector<float>& got,
                                       const std::vector<float>& want, int B, int T,
                                       std::size_t width, const std::vector<GradPart>& parts,
                                       std::string* which = nullptr) {
  double whole = 0;
  for (float w : want) whole += static_cast<double>(w) * w;
  const double floor = kNegligiblePart * std::sqrt(whole);
  double worst = 0;
  for (const GradPart& part : parts) {
    const PartNorms n = part_norms(got, want, B, T, width, part);
    const double denominator = std::max(std::sqrt(n.ref), floor);
    if (denominator == 0) continue;  // a zero gradient everywhere: nothing to be relative to
    const double ratio = std::sqrt(n.diff) / denominator;
    if (ratio > worst || std::isnan(ratio)) {
      worst = std::isnan(ratio) ? INFINITY : ratio;
      if (which != nullptr) *which = part.name;
    }
  }
  return worst;
}

}  // namespace strata::kernels::testing
