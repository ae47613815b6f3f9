// A GoogleTest environment that initialises MPI (a singleton: one rank, no mpirun needed)
// for test binaries linked with gtest_main, and finalises it after the last test. Include
// it in exactly one source file of a test binary. Started under mpirun with several ranks
// (the two-rank offload tests), a fatal failure on any rank ends the job (mpi_test_main.h)
// instead of leaving its peers in a collective.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "executor/comm/mpi_communicator.h"
#include "tests/executor/mpi_test_main.h"

namespace strata::testing_support {

class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    session_ = std::make_unique<MpiSession>(nullptr, nullptr);
    if (session_->world_size() > 1) {
      ::testing::UnitTest::GetInstance()->listeners().Append(
          new AbortOnFatalFailure(session_->world_rank()));
    }
  }
  void TearDown() override { session_.reset(); }

 private:
  std::unique_ptr<MpiSession> session_;
};

// gtest owns the environment; registered before main() runs the tests.
inline ::testing::Environment* const kMpiEnvironment =
    ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

}  // namespace strata::testing_support
