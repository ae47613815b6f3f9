// What every GoogleTest binary that runs under mpirun shares (runtime_comm_mpi_test, the GPU
// communicator tests, the abort probe; engine_mpi_environment.h for the binaries linked with
// gtest_main): one printer (rank 0 prints gtest's output, other ranks only their failures,
// prefixed with the rank), one exit code over ranks, and a job that ends when a rank cannot
// go on.
// A rank whose test body stops early -- an ASSERT failed or the body threw (GoogleTest
// catches the exception and reports it as a fatal failure) -- leaves its peers in the next
// collective, which it will never enter: the job hangs until something kills it (the H200's
// 4-rank host-staged test waited in MPI_Allreduce and MPI_Comm_split until the cap). So a
// fatal failure on any rank prints the test, the rank and the message, and MPI_Abort ends
// every rank at once with exit code 1.
// Deliberately not here: CUDA (cuda_comm_mpi_support.h adds the device selection).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "executor/comm/mpi_check.h"
#include "executor/comm/mpi_communicator.h"

namespace strata::testing_support {

// The exit code of a job ended by a rank's fatal failure or exception.
inline constexpr int kAbortedJobExitCode = 1;

// Ranks other than 0 print only their failures, prefixed with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed()) {
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                   result.file_name() ? result.file_name() : "?", result.line_number(),
                   result.message());
    }
  }

 private:
  int rank_;
};

// Prints `what` once for this rank and ends the whole job (never returns).
[[noreturn]] inline void abort_job(int rank, const char* what) {
  std::fprintf(stderr, "[rank %d] %s\n[rank %d] ending the job (MPI_Abort, exit code %d)\n", rank,
               what, rank, kAbortedJobExitCode);
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, kAbortedJobExitCode);
  std::_Exit(kAbortedJobExitCode);  // MPI_Abort does not return; this is for the compiler
}

// A fatal failure (an ASSERT, or an exception out of the test body) ends the job.
class AbortOnFatalFailure : public ::testing::EmptyTestEventListener {
 public:
  explicit AbortOnFatalFailure(int rank) : rank_(rank) {}
  // The test's name is kept here: UnitTest::current_test_info() inside OnTestPartResult
  // waits for the lock gtest holds while it reports the result (a deadlock).
  void OnTestStart(const ::testing::TestInfo& test) override {
    test_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.fatally_failed()) return;
    const std::string what =
        (test_.empty() ? std::string("outside any test") : test_) + ": " +
        (result.file_name() ? result.file_name() : "?") + ":" +
        std::to_string(result.line_number()) +
        ": fatal failure, the other ranks would wait for this one forever:\n" + result.message();
    abort_job(rank_, what.c_str());
  }

 private:
  int rank_;
  std::string test_;
};

// Installs the listeners for this rank: the failure printer on ranks other than 0 (gtest's own
// printer on rank 0) and the abort on a fatal failure on every rank.
inline void install_rank_listeners(int rank) {
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  listeners.Append(new AbortOnFatalFailure(rank));
}

// Runs every test with the listeners above; every rank returns the same code: 1 if any
// rank failed a test, 0 otherwise. MPI must be initialised.
inline int run_tests_on_every_rank(int rank) {
  install_rank_listeners(rank);
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  return failed;
}

// For a main's catch: an exception outside any test ends the job as well when MPI is up (a
// peer may be in a collective), and is an exit code of 2 before MPI started.
inline int fail_outside_tests(const char* program, const std::exception& e) {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (initialised == 0 || finalised != 0) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 2;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  abort_job(rank, (std::string(program) + ": " + e.what()).c_str());
}

// The whole main of a binary that needs nothing else: gtest's flags, MPI, every test on every
// rank, one verdict (`name` prefixes an error outside the tests).
inline int mpi_test_main(int argc, char** argv, const char* name) {
  ::testing::InitGoogleTest(&argc, argv);
  try {
    MpiSession session(&argc, &argv);
    return run_tests_on_every_rank(session.world_rank());
  } catch (const std::exception& e) {
    return fail_outside_tests(name, e);
  }
}

}  // namespace strata::testing_support
