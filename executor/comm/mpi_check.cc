// The message builders behind MPI_CHECK / MPI_CHECK_NOEXCEPT (mpi_check.h).
#include "executor/comm/mpi_check.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "cost_model/specs/errors.h"

namespace strata::detail {

std::string mpi_error_message(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  // MPI_Error_string may be called before MPI_Init and after a failure; if even it fails the
  // code alone is reported.
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    length = 0;
  }
  const std::string error_text = length > 0 ? std::string(text, static_cast<size_t>(length))
                                            : std::string("unknown MPI error");
  return fmt::format("{} failed at {}:{}: {} (MPI error code {})", call, file, line, error_text,
                     code);
}

void throw_mpi_error(int code, const char* call, const char* file, int line) {
  throw SystemError(mpi_error_message(code, call, file, line));
}

void abort_on_mpi_error(int code, const char* call, const char* file, int line) noexcept {
  // Only reached from destructors, which cannot throw: report and stop the process.
  std::fprintf(stderr, "strata: fatal: %s\n", mpi_error_message(code, call, file, line).c_str());
  std::abort();
}

}  // namespace strata::detail
