# `strata run` and `strata select` guarding a run, through the binary (tests/tools/
# child_process.h starts it in the background to signal it): clean stops on SIGTERM and a
# stopped rank ended by the watchdog (4 ranks, label mpi, ~10 s each), SIGINT to one rank,
# the --out lock, the checks before any step, and two runs in separate PID namespaces
# sharing an NVMe directory (~15 s together).
strata_add_test(run_stop_mpi_test
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/run_stop_mpi_test.cc
  LIBS strata_executor
  LABELS mpi)
target_compile_definitions(run_stop_mpi_test PRIVATE STRATA_BINARY="$<TARGET_FILE:strata>")
add_dependencies(run_stop_mpi_test strata)

strata_add_test(run_guard_cli_test
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/run_guard_cli_test.cc
  LIBS strata_specs)
target_compile_definitions(run_guard_cli_test PRIVATE STRATA_BINARY="$<TARGET_FILE:strata>")
add_dependencies(run_guard_cli_test strata)
