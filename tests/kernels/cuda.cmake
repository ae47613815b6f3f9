# CUDA backend tests. cuda_args_test is CPU-only (host-side argument checks, error macros,
# empty RAII owners) and runs everywhere the toolkit is; cuda_kernels_test compares every
# GPU kernel with its CPU twin and GTEST_SKIPs with the reason when there is no device
# (label gpu: `ctest -LE gpu` is the CPU set).
if(STRATA_HAVE_CUDA)
  strata_add_test(cuda_args_test
    SOURCES
      ${CMAKE_CURRENT_LIST_DIR}/cuda_adamw_plan_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/cuda_args_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/cuda_attention_choice_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/cuda_llama_args_test.cc
    LIBS strata_kernels_cuda
    LABELS kernels)

  # The strata binary carries the CUDA backend but does not link cuBLASLt, whose load-time
  # initialisation would cost every command ~80 ms (kernels/cuda/cublaslt_library.h); a
  # target that links it again fails here.
  add_test(NAME cuda.strata_does_not_link_cublaslt
    COMMAND sh -c "ldd \"$1\" | grep -q 'libcudart' && ! ldd \"$1\" | grep libcublasLt"
            sh $<TARGET_FILE:strata>)
  set_tests_properties(cuda.strata_does_not_link_cublaslt PROPERTIES LABELS kernels)

  strata_add_test(cuda_kernels_test
    SOURCES
      ${CMAKE_CURRENT_LIST_DIR}/grad_check.cc
      ${CMAKE_CURRENT_LIST_DIR}/cuda_attention_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/cuda_cudnn_attention_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/cuda_elementwise_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/cuda_gemm_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/cuda_gqa_attention_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/cuda_layernorm_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/cuda_llama_ops_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/cuda_loss_optim_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/cuda_rmsnorm_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/cuda_rope_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/cuda_swiglu_test.cc
    LIBS strata_kernels_cuda strata_kernels_cpu
    LABELS "gpu;kernels")

  # One binary, two label sets: its argument checks (suite CudaVocabParallelLossArgs) run
  # without a device and stay in `ctest -LE gpu`; its GPU cases are labelled gpu. Hence two
  # filtered discoveries instead of strata_add_test's one.
  add_executable(cuda_vocab_parallel_loss_test
    ${CMAKE_CURRENT_LIST_DIR}/grad_check.cc
    ${CMAKE_CURRENT_LIST_DIR}/cuda_vocab_parallel_loss_test.cc)
  target_link_libraries(cuda_vocab_parallel_loss_test PRIVATE
    strata_kernels_cuda strata_kernels_cpu GTest::gtest GTest::gtest_main strata_warnings)
  gtest_discover_tests(cuda_vocab_parallel_loss_test DISCOVERY_TIMEOUT 60
    TEST_FILTER "CudaVocabParallelLossArgs.*" PROPERTIES LABELS kernels)
  gtest_discover_tests(cuda_vocab_parallel_loss_test DISCOVERY_TIMEOUT 60
    TEST_FILTER "-CudaVocabParallelLossArgs.*" PROPERTIES LABELS "gpu;kernels")
endif()
