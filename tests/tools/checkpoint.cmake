# `strata run --save / --resume` through the binary (executor/checkpoint): a resumed run
# equals the uninterrupted one bit for bit on four plans, resharding onto other plans
# within 1e-4, a run killed with SIGKILL resumed from its last complete checkpoint, a
# stopped run's checkpoint, half-written checkpoints never taken for complete ones, and the
# flags checked before any rank starts. Label mpi: most tests start 2- or 4-rank jobs
# (~5-20 s each on the 2-core dev machine).
strata_add_test(checkpoint_mpi_test RUNS_STRATA
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/checkpoint_mpi_test.cc
  LIBS strata_executor
  LABELS mpi)
