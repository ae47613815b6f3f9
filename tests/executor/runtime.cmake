# Executor runtime: process groups, the accounting allocator, mpirun launch (plain gtest
# binaries) and the MPI communicator, its factory and typed operations, and the KV-copies
# groups of KV heads replicated over TP with their gradient sum and norm (one gtest binary
# run by mpirun with 4 and 8 ranks).
strata_add_test(executor_runtime_process_groups_test IN executor_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/runtime_process_groups_test.cc
  LIBS strata_executor)
strata_add_test(executor_runtime_allocator_test IN executor_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/runtime_allocator_test.cc
  LIBS strata_executor)
strata_add_test(executor_runtime_launch_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/runtime_launch_test.cc
  LIBS strata_executor
  LABELS mpi)

# Not strata_add_test: the binary has its own main (MPI_Init, one printer, exit code agreed
# over ranks) and must run under mpirun rather than be discovered test by test.
add_executable(executor_runtime_comm_mpi_test ${CMAKE_CURRENT_LIST_DIR}/runtime_comm_mpi_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/runtime_comm_typed_mpi_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/kv_copies_mpi_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/streamed_links_mpi_test.cc)
target_link_libraries(executor_runtime_comm_mpi_test PRIVATE strata_executor GTest::gtest
  strata_warnings)
# kv_copies_mpi_test.cc loads the bundled tiny-llama and train configs.
target_compile_definitions(executor_runtime_comm_mpi_test PRIVATE
  STRATA_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
foreach(ranks 4 8)
  # --oversubscribe: more ranks than the CI machine's 2 cores; --allow-run-as-root: CI
  # containers run as root (harmless otherwise).
  add_test(NAME executor_runtime_comm_mpi_np${ranks}
    COMMAND ${MPIEXEC_EXECUTABLE} -np ${ranks} --oversubscribe --bind-to none
            --allow-run-as-root $<TARGET_FILE:executor_runtime_comm_mpi_test>)
  set_tests_properties(executor_runtime_comm_mpi_np${ranks} PROPERTIES
    LABELS mpi PROCESSORS 2 TIMEOUT 60
    ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
endforeach()

# A rank whose test stops early (an exception, a failed ASSERT) ends the whole job, never a
# hang (mpi_test_main.h): its probe under 2 ranks, each case a few seconds.
add_executable(mpi_abort_probe ${CMAKE_CURRENT_LIST_DIR}/mpi_abort_probe.cc)
target_link_libraries(mpi_abort_probe PRIVATE strata_executor GTest::gtest strata_warnings)
foreach(probe IN ITEMS "RankOneThrowsWhileRankZeroWaits|probe: rank 1 threw on purpose"
                       "RankOneFailsAnAssertionWhileRankZeroWaits|probe: rank 1 failed on purpose")
  string(REPLACE "|" ";" parts "${probe}")
  list(GET parts 0 name)
  list(GET parts 1 message)
  add_test(NAME executor_mpi_abort_${name}
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/mpi_abort_check.sh ${MPIEXEC_EXECUTABLE}
            $<TARGET_FILE:mpi_abort_probe> ${name} "${message}")
  set_tests_properties(executor_mpi_abort_${name} PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 90)
endforeach()

# The allocator's arena: freed blocks reused by size, zero-fill and poison, accounting of
# requested bytes over reused blocks.
strata_add_test(executor_runtime_arena_test IN executor_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/runtime_arena_test.cc
  LIBS strata_executor)

# Fresh host pages faulted in on every thread (the pinned buffers' and set-up's pages).
strata_add_test(executor_runtime_host_pages_test IN executor_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/runtime_host_pages_test.cc
  LIBS strata_executor)
