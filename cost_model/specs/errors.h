// The typed exceptions every strata library throws. Libraries never print or exit;
// tools/strata/main.cc catches these once, prints one line and exits with code 2.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace strata {

// Bad input: a config file, a plan, a profile, a report or a flag. The message names the
// file, the key path, the value found and what was expected.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A plan that breaks a rule (divisibility, rank count, schedule constraints).
class InfeasiblePlan : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A budgeted allocation that does not fit in its tier.
class OutOfMemory : public std::runtime_error {
 public:
  OutOfMemory(std::string tier, std::int64_t requested_bytes, std::int64_t free_bytes,
              const std::string& message)
      : std::runtime_error(message),
        tier(std::move(tier)),
        requested_bytes(requested_bytes),
        free_bytes(free_bytes) {}
  std::string tier;
  std::int64_t requested_bytes;
  std::int64_t free_bytes;
};

// A failed system, MPI, CUDA, cuBLAS, NCCL or io_uring call; the message names the call,
// the file and line, and the library's own error text.
class SystemError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace strata
