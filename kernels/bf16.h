// Host-side bf16 arithmetic: conversion from fp32 with round-to-nearest-even (what
// __float2bfloat16 does on the GPU) and back (exact). Used where host code sums or checks
// bf16 data: the MPI communicators' rank-ordered bf16 sums and the tests.
// Deliberately not here: device code (kernels/cuda uses cuda_bf16.h).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/dtype.h"

namespace strata {

inline float bf16_to_float(Bf16Bits b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest, ties to even; NaN stays a (quiet) NaN.
inline Bf16Bits float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return Bf16Bits{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
  }
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return Bf16Bits{static_cast<std::uint16_t>((u + rounding) >> 16)};
}

}  // namespace strata
