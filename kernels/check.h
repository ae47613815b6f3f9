// KernelError: the one exception a kernel throws when its arguments are wrong (a null
// tensor, a non-positive dimension, a size that does not divide, a token id out of range).
// Kernels sit below cost_model, so this header deliberately does not include
// cost_model/specs/errors.h; a caller that wants a ConfigError catches and rethrows.
// It deliberately holds no checking macros: each kernel builds its own message with fmt
// naming the kernel, the argument and the value.
#pragma once

#include <stdexcept>

namespace strata::kernels {

// Bad arguments to a kernel (shape, null pointer, index out of range). The message names
// the kernel, the argument, the value found and what was expected.
class KernelError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace strata::kernels
