# `strata run` and `strata select` guarding a run, through the binary (tests/tools/
# child_process.h starts it in the background to signal it): clean stops on SIGTERM and a
# stopped rank ended by the watchdog (4 ranks, label mpi, ~10 s each), SIGINT to one rank,
# the --out lock, the checks before any step, and two runs in separate PID namespaces
# sharing an NVMe directory (~15 s together).
strata_add_test(run_stop_mpi_test RUNS_STRATA
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/run_stop_mpi_test.cc
  LIBS strata_executor
  LABELS mpi)

strata_add_test(run_guard_cli_test RUNS_STRATA
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/run_guard_cli_test.cc
  LIBS strata_specs)
