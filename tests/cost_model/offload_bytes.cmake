# cost_model's offload bytes per link per step (offload_transfer_bytes), worked by hand.
strata_add_test(cost_model_offload_bytes_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/offload_bytes_test.cc
  LIBS strata_cost_model)
