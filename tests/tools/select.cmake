# `strata select` through the binary: bit-for-bit against `strata run`, the report, and the
# refusals of bad workloads (~20 s on the 2-core dev machine: 18 three-step runs).
strata_add_test(select_cli_test RUNS_STRATA
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/select_cli_test.cc
  LIBS strata_specs)

# Real data and weights through the binary: Megatron and llm.c files train, corrupted files
# are refused before launch, weights move between plans (~40 s on the 2-core dev machine).
strata_add_test(data_cli_test RUNS_STRATA
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/data_cli_test.cc
  LIBS strata_executor
  LABELS mpi)

# Hugging Face Llama weights through the binary: saved names, loaded under other plans and
# from shards, a missing shard refused with exit 2 (~30 s on the 2-core dev machine).
strata_add_test(hf_llama_weights_cli_test RUNS_STRATA
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/hf_weights_cli_test.cc
  LIBS strata_executor
  LABELS mpi)

# `strata select` on a CUDA cluster against `strata run --backend cuda`, job by job (label
# gpu: skipped without a device; ~1 min on an H100).
if(STRATA_HAVE_CUDA)
  strata_add_test(select_cuda_test RUNS_STRATA
    SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/select_cuda_test.cc
    LIBS strata_specs CUDA::cudart
    LABELS gpu)
endif()
