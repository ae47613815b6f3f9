# The CPU backend's calibrated time model (cost_model/pricing/compute_model.h).
strata_add_test(cpu_time_model_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_time_model_test.cc
  LIBS strata_cost_model)

# Llama's operators at a profile's rates for them (compute_model.h: llama_op_bytes).
strata_add_test(llama_rates_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/llama_rates_test.cc
  LIBS strata_cost_model)

# The loop's feedback: a run folded into the profile (cost_model/pricing/profile_feedback.h).
strata_add_test(profile_feedback_test IN cost_model_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/profile_feedback_test.cc
  LIBS strata_cost_model)
