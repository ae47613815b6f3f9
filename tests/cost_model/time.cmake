# The time model: primitives worked by hand (collectives, GEMM curve, TP/PP/DP terms, bubble,
# predict() invariants) and the published Megatron-LM runs (Table 1 within 15%, Table 2 trends).
strata_add_test(time_model_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/time_model_test.cc
  LIBS strata_time_model)
strata_add_test(published_runs_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/published_runs_test.cc
  LIBS strata_time_model)
