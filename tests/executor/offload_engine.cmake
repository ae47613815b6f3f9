# Offload tiers in the engine: params / gradients / optimizer state on the host or NVMe,
# the bytes per link equal to the cost model's, a model 4x the device budget trained from
# NVMe. The same binary runs single-rank, and under mpirun -np 2 for the d = 2 / p = 2 plans.
strata_add_test(executor_offload_engine_test IN executor_engine_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/offload_engine_test.cc
  LIBS strata_executor)
add_test(NAME executor_offload_engine_two_ranks
  COMMAND ${MPIEXEC_EXECUTABLE} -np 2 --oversubscribe --bind-to none --allow-run-as-root
          $<TARGET_FILE:executor_engine_tests> --gtest_filter=OffloadEngine.TwoRank*)
set_tests_properties(executor_offload_engine_two_ranks PROPERTIES
  LABELS mpi PROCESSORS 2 TIMEOUT 300 ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")

# `strata run` with offload plans (spawns the strata binary; the 2-rank plan relaunches under
# mpirun): report transfers, --nvme-dir faults, a full NVMe tier.
strata_add_test(executor_offload_engine_cli_test RUNS_STRATA
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/offload_engine_cli_test.cc
  LIBS strata_cost_model
  LABELS mpi)
