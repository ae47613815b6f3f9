# `strata run` across nodes through the binary (label mpi: outside mpirun launches, ~20 s).
strata_add_test(multi_node_cli_test
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/multi_node_cli_test.cc
  LIBS strata_specs
  LABELS mpi)
target_compile_definitions(multi_node_cli_test PRIVATE STRATA_BINARY="$<TARGET_FILE:strata>")
add_dependencies(multi_node_cli_test strata)
