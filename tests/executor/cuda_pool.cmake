# The CUDA memory prediction against the CUDA backend's pool requests, replayed without a GPU
# (executor/cuda/pool_recorder.h), and anchored to an H200 measurement.
strata_add_test(cuda_pool_prediction_test IN executor_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_pool_prediction_test.cc
  LIBS strata_executor)
