# `strata predict`'s memory by kind against `strata run`'s memory_tags.json, through the
# binary, on CPU-backend plans of the tiny model (~15 s on the 2-core dev machine: three
# two-step runs of 2-4 ranks).
strata_add_test(memory_kinds_cli_test RUNS_STRATA
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/memory_kinds_cli_test.cc
  LIBS strata_specs
  LABELS mpi)
