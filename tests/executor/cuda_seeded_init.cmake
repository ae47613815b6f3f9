# Seeded initial values drawn on the GPU against the CPU's, bit for bit; GTEST_SKIPs
# without a device (label gpu).
if(STRATA_HAVE_CUDA)
  strata_add_test(cuda_seeded_init_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_seeded_init_test.cc
    LIBS strata_executor_cuda strata_kernels_cuda
    LABELS gpu)
endif()
