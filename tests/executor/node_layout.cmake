# Across nodes: the rank layout and its check, hostfiles, the shared-directory verdict
# (plain gtest, no MPI).
strata_add_test(executor_node_layout_test IN executor_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/node_layout_test.cc
  LIBS strata_executor)

# The launcher's record of which rank ended first (TCP on this machine's loopback).
strata_add_test(executor_rank_liveness_test IN executor_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/rank_liveness_test.cc
  LIBS strata_executor)
