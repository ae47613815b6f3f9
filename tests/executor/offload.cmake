# Offload tiers (executor/offload): io_uring I/O path and its fault paths, the NVMe store
# (accounting, cleanup, crash cleanup), the streamed CPU AdamW, the bandwidth probe.
strata_add_test(executor_offload_test IN executor_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/offload_io_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/offload_store_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/offload_adam_stream_test.cc
  LIBS strata_executor)
