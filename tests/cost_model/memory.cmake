# The memory model: ZeRO model state, stage parameters, activation tensor lists against
# Korthikanti et al.'s formula, in-flight closed forms, a tiny model worked by hand.
strata_add_test(memory_model_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/memory_model_test.cc
  LIBS strata_memory_model)

# The published 1T plan's pipeline stage on strata's CUDA engine, derived by hand.
strata_add_test(megatron_1t_memory_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/megatron_1t_memory_test.cc
  LIBS strata_memory_model)

# The memory walk of a steady phase cut short against the full walk, on a matrix of plans.
strata_add_test(steady_cut_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/steady_cut_test.cc
  LIBS strata_memory_model)

# The memory floor the planner drops by, never above the walked estimate, on a matrix of plans.
strata_add_test(memory_floor_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/memory_floor_test.cc
  LIBS strata_memory_model)
