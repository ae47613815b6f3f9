# Parameter initialisation on the OpenMP team: thread-count independence, the bits of the
# loop it replaced, set-up progress.
strata_add_test(executor_param_init_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/param_init_test.cc
  LIBS strata_executor
  LABELS executor)
