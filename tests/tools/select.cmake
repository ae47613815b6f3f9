# `strata select` through the binary: bit-for-bit against `strata run`, the report, and the
# refusals of bad workloads (~20 s on the 2-core dev machine: 18 three-step runs).
strata_add_test(select_cli_test
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/select_cli_test.cc
  LIBS strata_specs)
target_compile_definitions(select_cli_test PRIVATE STRATA_BINARY="$<TARGET_FILE:strata>")
add_dependencies(select_cli_test strata)

# Real data and weights through the binary: Megatron and llm.c files train, corrupted files
# are refused before launch, weights move between plans (~40 s on the 2-core dev machine).
strata_add_test(data_cli_test
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/data_cli_test.cc
  LIBS strata_executor
  LABELS mpi)
target_compile_definitions(data_cli_test PRIVATE STRATA_BINARY="$<TARGET_FILE:strata>")
add_dependencies(data_cli_test strata)
