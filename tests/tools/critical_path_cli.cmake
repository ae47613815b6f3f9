# `strata compare --critical-path` through the binary: a one-step tiny-3d run's measured
# critical path sums to its measured step time, and the merged trace marks both paths as
# chains (~20 s on the 2-core dev machine: eight ranks).
strata_add_test(critical_path_cli_test RUNS_STRATA
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/critical_path_cli_test.cc
  LIBS strata_specs
  LABELS mpi)
