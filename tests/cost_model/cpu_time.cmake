# The CPU backend's calibrated time model (cost_model/compute_model.h).
strata_add_test(cpu_time_model_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_time_model_test.cc
  LIBS strata_cost_model)
