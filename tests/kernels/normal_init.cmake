# The counter-based normal initialiser's CPU loops against the formula, bit for bit.
strata_add_test(kernels_normal_init_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/normal_init_test.cc
  LIBS strata_kernels_cpu
  LABELS kernels)
