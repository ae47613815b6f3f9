# cost_model's offload times priced from the offload bytes (offload_traffic) over the link
# rates, and predict()'s "transfers", worked by hand.
strata_add_test(cost_model_offload_time_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/offload_time_test.cc
  LIBS strata_cost_model)
