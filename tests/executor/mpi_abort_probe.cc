// The probe of mpi_test_main.h's promise, run by mpi_abort_check.sh under `mpirun -np 2` (one
// test at a time, by --gtest_filter): rank 1 stops its test early -- it throws, or an ASSERT
// fails -- while rank 0 waits in a barrier that rank 1 never enters. Without the abort the
// job would hang until killed; with it, it ends at once with a nonzero exit code and rank 1's
// message. Both tests fail by design, so the binary is no test of its own (not discovered).
#include <gtest/gtest.h>
#include <mpi.h>

#include <stdexcept>

#include "executor/comm/mpi_communicator.h"
#include "tests/executor/mpi_test_main.h"

namespace strata {
namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

TEST(MpiAbortProbe, RankOneThrowsWhileRankZeroWaits) {
  if (world_rank() == 1) throw std::runtime_error("probe: rank 1 threw on purpose");
  MPI_Barrier(MPI_COMM_WORLD);  // never completes: rank 1 is gone from this test
}

TEST(MpiAbortProbe, RankOneFailsAnAssertionWhileRankZeroWaits) {
  if (world_rank() == 1) {
    ASSERT_EQ(world_rank(), 0) << "probe: rank 1 failed on purpose";
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  return strata::testing_support::mpi_test_main(argc, argv, "mpi_abort_probe");
}
