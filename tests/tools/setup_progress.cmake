# strata run's set-up progress lines (tools/strata/setup_progress.cc, compiled in).
strata_add_test(tools_setup_progress_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/setup_progress_test.cc
    ${PROJECT_SOURCE_DIR}/tools/strata/setup_progress.cc
  LIBS strata_executor fmt::fmt
  LABELS tools)
