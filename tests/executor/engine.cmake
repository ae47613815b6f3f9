# Executor GPT model and engine: single-rank model tests (MPI singleton, no mpirun), data
# tests, and the plan-equivalence matrix run under mpirun (label mpi).
strata_add_test(executor_model_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_test.cc
  LIBS strata_executor)
