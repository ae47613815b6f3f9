# `strata plot` through the binary: a three-step pipeline run drawn beside its prediction,
# each PNG read back (zlib, not the plotting library) for its size and the data drawn in it;
# bad inputs and a missing matplotlib are exit 2 (~10 s on the 2-core dev machine).
find_package(ZLIB REQUIRED)
strata_add_test(plot_cli_test RUNS_STRATA
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/plot_cli_test.cc
  LIBS strata_specs ZLIB::ZLIB
  LABELS mpi)
