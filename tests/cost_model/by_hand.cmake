# The tiny single-rank plan's key numbers (parameter count, peak device memory by kind,
# model FLOPs and MFU) derived by hand, so that a golden rewrite that moves one fails.
strata_add_test(tiny_single_by_hand_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/tiny_single_by_hand_test.cc
  LIBS strata_cost_model)
