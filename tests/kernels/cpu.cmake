# CPU reference kernels: each op's forward against a naive reference, its backward against
# finite differences, and its argument checks.
strata_add_test(kernels_cpu_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/grad_check.cc
    ${CMAKE_CURRENT_LIST_DIR}/adamw_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/attention_grad_metric_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/attention_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/cross_entropy_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/elementwise_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/embedding_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/fast_exp_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/fast_exp_avx512_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/flash_attention_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/gelu_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/gemm_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/gqa_attention_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/isa_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/layernorm_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/rmsnorm_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/rope_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/swiglu_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/tile_gemm_test.cc
  LIBS strata_kernels_cpu
  LABELS kernels)
# The ISA switch under each kernel path, and under a value no CPU knows (the test expects
# the error).
strata_add_kernel_path_tests(kernels_cpu_test "Isa.*")
add_test(NAME kernels_cpu_test.isa_unknown_value COMMAND kernels_cpu_test "--gtest_filter=Isa.*")
set_tests_properties(kernels_cpu_test.isa_unknown_value PROPERTIES
  ENVIRONMENT "STRATA_CPU_ISA=avx9" LABELS kernels)
