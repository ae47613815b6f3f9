# Checkpoint manifests and directories (executor/checkpoint/manifest.h, durable_files.h):
# names, the manifest's round trip and refusals, what counts as complete. No ranks start;
# the runs that save and resume are tests/tools/checkpoint.cmake's.
strata_add_test(executor_checkpoint_manifest_test IN executor_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/checkpoint_manifest_test.cc
  LIBS strata_executor)
