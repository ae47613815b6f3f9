# `strata compare --critical-path` through the binary: a one-step tiny-3d run's measured
# critical path sums to its measured step time, and the merged trace marks both paths as
# chains (~20 s on the 2-core dev machine: eight ranks).
strata_add_test(critical_path_cli_test
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/critical_path_cli_test.cc
  LIBS strata_specs
  LABELS mpi)
target_compile_definitions(critical_path_cli_test PRIVATE STRATA_BINARY="$<TARGET_FILE:strata>")
add_dependencies(critical_path_cli_test strata)
