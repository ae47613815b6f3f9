# `strata select` through the binary: bit-for-bit against `strata run`, the report, and the
# refusals of bad workloads (~20 s on the 2-core dev machine: 18 three-step runs).
strata_add_test(select_cli_test
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/select_cli_test.cc
  LIBS strata_specs)
target_compile_definitions(select_cli_test PRIVATE STRATA_BINARY="$<TARGET_FILE:strata>")
add_dependencies(select_cli_test strata)
