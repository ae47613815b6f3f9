// A GoogleTest environment that initialises MPI (a singleton: one rank, no mpirun needed)
// for test binaries linked with gtest_main, and finalises it after the last test. Include
// it in exactly one source file of a test binary.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "executor/comm/mpi_communicator.h"

namespace strata::testing_support {

class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { session_ = std::make_unique<MpiSession>(nullptr, nullptr); }
  void TearDown() override { session_.reset(); }

 private:
  std::unique_ptr<MpiSession> session_;
};

// gtest owns the environment; registered before main() runs the tests.
inline ::testing::Environment* const kMpiEnvironment =
    ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

}  // namespace strata::testing_support
