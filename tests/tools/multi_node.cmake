# `strata run` across nodes through the binary (label mpi: outside mpirun launches, ~20 s).
strata_add_test(multi_node_cli_test RUNS_STRATA
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/multi_node_cli_test.cc
  LIBS strata_specs
  LABELS mpi)

# The same across 2 simulated nodes (tools/sim_nodes.sh: network namespaces), ~30 s;
# skipped (77) with the reason where namespaces cannot be made.
add_test(NAME sim_nodes_test
  COMMAND ${PROJECT_SOURCE_DIR}/tests/tools/sim_nodes_test.sh $<TARGET_FILE:strata>
          ${PROJECT_SOURCE_DIR}/tools/sim_nodes.sh ${CMAKE_CURRENT_BINARY_DIR}/sim_nodes_test)
# Not serial: half of it is waiting for a lost node's timeouts with the cores idle, and its
# only time bound is loose (the timeout + 25 s, against ~10 s on a quiet machine). Its
# namespaces are named after its own process, but the two simulated-node tests share a lock so
# that their daemons never meet.
set_tests_properties(sim_nodes_test PROPERTIES
  LABELS mpi SKIP_RETURN_CODE 77 TIMEOUT 180 RESOURCE_LOCK sim_nodes)

# `strata calibrate --hostfile` across 2 simulated nodes: both links in the profile, and
# `predict` pricing a DP pair across nodes on the inter-node one; across 3, p2p from the
# ring's hops (~30 s); skipped (77) as sim_nodes_test.
add_test(NAME sim_nodes_calibrate_test
  COMMAND ${PROJECT_SOURCE_DIR}/tests/tools/sim_nodes_calibrate_test.sh $<TARGET_FILE:strata>
          ${PROJECT_SOURCE_DIR}/tools/sim_nodes.sh ${CMAKE_CURRENT_BINARY_DIR}/sim_nodes_calibrate_test)
set_tests_properties(sim_nodes_calibrate_test PROPERTIES
  LABELS mpi SKIP_RETURN_CODE 77 TIMEOUT 120 RUN_SERIAL TRUE RESOURCE_LOCK sim_nodes)

# `strata run` under a real srun: a one-machine SLURM cluster the test starts and stops
# itself (~13 s on the loaded 2-core VM); skipped (77) without root or slurm-wlm.
add_test(NAME slurm_srun_test
  COMMAND ${PROJECT_SOURCE_DIR}/tests/tools/slurm_srun_test.sh $<TARGET_FILE:strata>
          ${CMAKE_CURRENT_BINARY_DIR}/slurm_srun_test)
set_tests_properties(slurm_srun_test PROPERTIES
  LABELS mpi SKIP_RETURN_CODE 77 TIMEOUT 120 RUN_SERIAL TRUE)
