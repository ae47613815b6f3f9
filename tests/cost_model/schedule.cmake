# Schedule and Program generators, the Program simulator and the Chrome trace writer
# (library strata_schedule).
strata_add_test(schedule_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/schedule_test.cc
  LIBS strata_schedule strata_memory_model)
strata_add_test(program_simulator_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/program_simulator_test.cc
  LIBS strata_schedule)
strata_add_test(chrome_trace_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/chrome_trace_test.cc
  LIBS strata_schedule)
strata_add_test(program_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/program_test.cc
  LIBS strata_schedule)
strata_add_test(program_sends_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/program_sends_test.cc
  LIBS strata_schedule)
# The Program's dependency graph (Boost.Graph): its deadlock check and its critical path.
strata_add_test(program_check_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/program_check_test.cc
  LIBS strata_cost_model)
strata_add_test(critical_path_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/critical_path_test.cc
  LIBS strata_cost_model)
