// MPI_CHECK(call): runs an MPI call and throws strata::SystemError naming the call text, the
// file and line, the error code and MPI's own error string when it does not return
// MPI_SUCCESS. MPI_CHECK_NOEXCEPT is its twin for destructors: it prints the same message to
// stderr and aborts. Errors only come back as codes on communicators whose error handler is
// MPI_ERRORS_RETURN (MpiCommunicator and MpiSession set it); with MPI's default handler a
// failing call aborts the job before MPI_CHECK can see it.
#pragma once

#include <mpi.h>

#include <string>

namespace strata::detail {

// "MPI_Allreduce(...) failed at executor/comm/x.cc:12: MPI_ERR_RANK: invalid rank (code 6)".
std::string mpi_error_message(int code, const char* call, const char* file, int line);
[[noreturn]] void throw_mpi_error(int code, const char* call, const char* file, int line);
void abort_on_mpi_error(int code, const char* call, const char* file, int line) noexcept;

}  // namespace strata::detail

#define MPI_CHECK(call)                                                        \
  do {                                                                         \
    const int strata_mpi_rc_ = (call);                                         \
    if (strata_mpi_rc_ != MPI_SUCCESS) {                                       \
      ::strata::detail::throw_mpi_error(strata_mpi_rc_, #call, __FILE__, __LINE__); \
    }                                                                          \
  } while (0)

#define MPI_CHECK_NOEXCEPT(call)                                               \
  do {                                                                         \
    const int strata_mpi_rc_ = (call);                                         \
    if (strata_mpi_rc_ != MPI_SUCCESS) {                                       \
      ::strata::detail::abort_on_mpi_error(strata_mpi_rc_, #call, __FILE__, __LINE__); \
    }                                                                          \
  } while (0)
