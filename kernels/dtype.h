// DType: the element types of strata's tensors and messages, shared by the kernels, the
// communicators and the engine's tensors. bf16 is stored as its 16 raw bits (the upper half of
// an fp32), so host code can hold and move it without a CUDA header; kernels/bf16.h converts.
// Deliberately not here: arithmetic on bf16 (kernels/bf16.h), tensors (executor/engine).
#pragma once

#include <cstdint>
#include <string_view>

namespace strata {

enum class DType : std::uint8_t {
  kF32,   // float: fp32 activations on the CPU backend, master weights, gradients, moments
  kBF16,  // bfloat16: the CUDA backend's activations and compute copy of the weights
  kF64,   // double: losses, norms
  kI64,   // std::int64_t: counts
  kI32,   // std::int32_t: token ids
};

constexpr std::int64_t dtype_bytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF64: return 8;
    case DType::kI64: return 8;
    case DType::kI32: return 4;
  }
  return 0;
}

constexpr std::string_view to_string(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
    case DType::kI64: return "i64";
    case DType::kI32: return "i32";
  }
  return "unknown";
}

// bf16's raw bits on the host.
struct Bf16Bits {
  std::uint16_t bits = 0;
};

}  // namespace strata
