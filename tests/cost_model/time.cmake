# The time model: primitives worked by hand (collectives, GEMM curve, TP and PP terms,
# predict() invariants), each op's price (op_costs), predict() with and without a cache, and
# the published Megatron-LM runs (Table 1 within 15%, Table 2 trends).
strata_add_test(time_model_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/time_model_test.cc
  LIBS strata_time_model)
strata_add_test(op_costs_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/op_costs_test.cc
  LIBS strata_time_model)
strata_add_test(cost_model_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cost_model_test.cc
  LIBS strata_time_model)
strata_add_test(published_runs_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/published_runs_test.cc
  LIBS strata_time_model)
