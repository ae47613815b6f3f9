# Executor GPT model and engine: single-rank model tests (MPI singleton, no mpirun), data
# tests, and the plan-equivalence matrix run under mpirun (label mpi).
strata_add_test(executor_model_test IN executor_engine_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_test.cc
  LIBS strata_executor)

# THE EQUIVALENCE MATRIX: every value of every axis (t 1,2; p 1,2,4; v 1,2; d 1,2; ZeRO 0-3;
# gpipe, 1f1b, interleaved; micro-batch 1,2,4) and the combinations that interact (TP with
# PP and the tied embedding, ZeRO with PP, interleaving with DP, clipping's global norm over
# TP, PP and DP), up to 8 ranks; sequence parallelism and recomputation (full, selective)
# with TP, PP, ZeRO and interleaving; offload of the optimizer state, gradients and
# parameters to host memory and NVMe. Each entry: t p d v schedule zero micro_batch grad_clip
# [recompute [sp|nosp [offload tier]]].
add_executable(executor_engine_equivalence ${CMAKE_CURRENT_LIST_DIR}/engine_equivalence_main.cc)
target_link_libraries(executor_engine_equivalence PRIVATE strata_executor strata_warnings)
target_compile_definitions(executor_engine_equivalence PRIVATE
  STRATA_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
set(strata_equivalence_plans
  "t2_1_1_1_1f1b_0_2_0"
  "t1_2_1_1_1f1b_0_1_0"
  "t1_2_1_1_gpipe_0_2_0"
  "t1_2_1_2_interleaved_0_1_0"
  "t1_4_1_1_1f1b_0_1_0"
  "t1_4_1_2_interleaved_0_2_0"
  "t1_1_2_1_1f1b_0_2_0"
  "t1_1_2_1_1f1b_1_1_0"
  "t1_1_2_1_gpipe_2_4_0"
  "t1_1_2_1_1f1b_3_2_0"
  "t2_2_1_1_1f1b_0_1_0"
  "t2_1_2_1_1f1b_3_1_0"
  "t1_2_2_2_interleaved_1_1_0"
  "t2_2_2_1_1f1b_2_1_0"
  "t2_2_2_2_interleaved_3_1_0"
  "t1_4_2_1_gpipe_2_1_0"
  "t2_4_1_2_interleaved_0_1_0"
  "t1_4_2_2_interleaved_3_1_0"
  "t2_1_1_1_1f1b_0_4_0.05"
  "t2_2_2_1_1f1b_1_1_0.05"
  # Sequence parallelism and activation recomputation (optional fields: recompute, sp).
  "t2_1_1_1_1f1b_0_2_0_none_sp"
  "t2_2_1_1_1f1b_0_1_0_full_sp"
  "t2_1_2_1_gpipe_3_1_0_selective_sp"
  "t1_2_2_2_interleaved_2_1_0_full"
  "t1_2_1_1_gpipe_1_2_0.05_selective"
  # Offload (optional field after sp: the tier of every state the ZeRO stage lets go).
  "t1_1_2_1_1f1b_3_2_0_none_nosp_cpu"
  "t1_2_2_1_1f1b_2_1_0.05_full_nosp_nvme"
  "t2_1_1_1_gpipe_1_2_0_none_nosp_cpu"
  "t1_1_2_1_1f1b_3_1_0_selective_nosp_nvme"
  # Uneven pipeline stages (optional field after offload: first..last stage layers of 8).
  "t1_3_1_1_1f1b_0_1_0_none_nosp_none_2..3"
  "t1_4_1_1_gpipe_1_1_0.05_full_nosp_none_2..0"
  "t2_3_1_1_1f1b_3_1_0_none_sp_none_3..2"
  # Combinations the entries above miss: offload with v > 1 (and with ZeRO-3 and clipping: interleaved + ZeRO-3 +
  # offload), offload with SP, selective recompute with SP and interleaving, uneven stages
  # with d = 2, v = 4 (one layer a chunk).
  "t1_2_2_2_interleaved_3_1_0.05_none_nosp_cpu"
  "t1_2_1_2_interleaved_1_1_0_none_nosp_nvme"
  "t2_1_1_1_1f1b_2_2_0_none_sp_cpu"
  "t2_2_1_2_interleaved_0_1_0.05_selective_sp"
  "t1_2_2_1_1f1b_1_1_0.05_none_nosp_none_3..5"
  "t1_2_1_4_interleaved_0_1_0"
  # Uneven interleaved stages (Llama 3's recipe): 8 layers on p2 v2 as 1 | 3 | 3 | 1, the
  # first and last virtual stage (with the embedding, with the head) shorter than the others.
  "t1_2_1_2_interleaved_0_1_0_none_nosp_none_1..1"
  "t1_2_2_2_interleaved_3_1_0.05_selective_nosp_none_1..1")
# The single rank every entry compares with is trained by the first entry that needs it and
# read by the others (tests/executor/reference_cache.h); this fixture empties the directory
# before any entry of a ctest run starts, so each run computes its own.
set(strata_equivalence_references ${CMAKE_CURRENT_BINARY_DIR}/equivalence_references)
add_test(NAME executor_equivalence_references_cleared
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${strata_equivalence_references})
set_tests_properties(executor_equivalence_references_cleared PROPERTIES
  FIXTURES_SETUP equivalence_references LABELS mpi)
set(strata_equivalence_reference_args --reference-dir ${strata_equivalence_references})
foreach(entry IN LISTS strata_equivalence_plans)
  strata_equivalence_entry("${entry}" args ranks)
  add_test(NAME executor_engine_equivalence_${entry}
    COMMAND ${MPIEXEC_EXECUTABLE} -np ${ranks} --oversubscribe --bind-to none
            --allow-run-as-root $<TARGET_FILE:executor_engine_equivalence>
            ${strata_equivalence_reference_args} ${args})
  set_tests_properties(executor_engine_equivalence_${entry} PROPERTIES
    LABELS mpi PROCESSORS 2 TIMEOUT 120 FIXTURES_REQUIRED equivalence_references
    FAIL_REGULAR_EXPRESSION "FAILED|over 1e-4|memory over 5%"
    ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
  # The same plan under the CPU backend's CUDA-semantics mode (executor/cpu/cuda_semantics):
  # queued streams, a pool that reuses freed blocks at once with NaN, communicators that write
  # at once, and the happens-before checker; against the plain CPU single rank.
  add_test(NAME executor_engine_cuda_semantics_${entry}
    COMMAND ${MPIEXEC_EXECUTABLE} -np ${ranks} --oversubscribe --bind-to none
            --allow-run-as-root $<TARGET_FILE:executor_engine_equivalence> --cuda-semantics
            ${strata_equivalence_reference_args} ${args})
  set_tests_properties(executor_engine_cuda_semantics_${entry} PROPERTIES
    LABELS "mpi;cuda_semantics" PROCESSORS 2 TIMEOUT 120
    FIXTURES_REQUIRED equivalence_references
    ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
endforeach()

# Captured steps (--cuda-graphs: engine.h, "Captured steps") under the CUDA-semantics mode,
# on the plans a graph takes (no pipeline, no offload): DP with ZeRO-1 and clipping, ZeRO-3,
# TP with SP, and TP with DP, ZeRO-2, selective recomputation and clipping; the first step op
# by op, the second captured, three replays, against the plain CPU single rank.
foreach(entry IN ITEMS t1_1_2_1_1f1b_1_1_0.05 t1_1_2_1_1f1b_3_2_0 t2_1_1_1_1f1b_0_2_0_none_sp
                       t2_1_2_1_1f1b_2_1_0.05_selective_sp)
  strata_equivalence_entry("${entry}" args ranks)
  add_test(NAME executor_engine_cuda_graphs_${entry}
    COMMAND ${MPIEXEC_EXECUTABLE} -np ${ranks} --oversubscribe --bind-to none
            --allow-run-as-root $<TARGET_FILE:executor_engine_equivalence> --cuda-semantics
            --cuda-graphs ${strata_equivalence_reference_args} ${args})
  set_tests_properties(executor_engine_cuda_graphs_${entry} PROPERTIES
    LABELS "mpi;cuda_semantics" PROCESSORS 2 TIMEOUT 120
    FIXTURES_REQUIRED equivalence_references FAIL_REGULAR_EXPRESSION "FAILED|over 1e-4"
    ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
endforeach()

# The Llama family's matrix (configs/models/tiny-llama.json: RMSNorm, SwiGLU, RoPE, 2 KV
# heads of 4, untied output, no biases; 4 layers), kept short for CI: TP (KV heads split),
# PP (the untied output layer on the last stage), interleaving, DP with ZeRO 0-3, SP with
# both recomputations, offload; t4: the 2 KV heads replicated over the TP group (each shared
# by 2 ranks, their gradients summed), with clipping (the norm counts each head once), with
# PP and SP, with DP and ZeRO-3, and with offloaded gradients (the sums before every
# micro-batch's reduction). Same entry format and checks as above (the memory check
# included); the second list also runs under the CUDA-semantics mode.
set(strata_llama_equivalence_plans
  "t2_1_1_1_1f1b_0_2_0"
  "t1_2_1_1_1f1b_0_1_0"
  "t1_2_1_2_interleaved_0_1_0"
  "t1_1_2_1_1f1b_1_1_0.05"
  "t1_1_2_1_1f1b_3_2_0"
  "t2_1_2_1_gpipe_2_1_0_selective_sp"
  "t2_2_1_1_1f1b_0_1_0_full_sp"
  "t1_1_2_1_1f1b_3_2_0_none_nosp_cpu"
  "t4_1_1_1_1f1b_0_2_0.05"
  "t4_2_1_1_1f1b_0_1_0_full_sp"
  "t4_1_2_1_1f1b_3_1_0"
  "t4_1_1_1_1f1b_2_2_0_none_nosp_cpu")
set(strata_llama_cuda_semantics_plans
  "t2_1_1_1_1f1b_0_2_0"
  "t1_2_1_2_interleaved_0_1_0"
  "t2_1_2_1_gpipe_3_1_0_selective_sp"
  "t1_1_2_1_1f1b_3_2_0_none_nosp_cpu"
  "t4_1_1_1_1f1b_0_2_0.05"
  "t4_1_2_1_1f1b_3_1_0")
foreach(mode IN ITEMS plain cuda_semantics)
  if(mode STREQUAL "plain")
    set(plans ${strata_llama_equivalence_plans})
    set(flags "")
    set(prefix executor_engine_equivalence_llama)
    set(labels "mpi")
  else()
    set(plans ${strata_llama_cuda_semantics_plans})
    set(flags "--cuda-semantics")
    set(prefix executor_engine_cuda_semantics_llama)
    set(labels "mpi;cuda_semantics")
  endif()
  foreach(entry IN LISTS plans)
    strata_equivalence_entry("${entry}" args ranks)
    add_test(NAME ${prefix}_${entry}
      COMMAND ${MPIEXEC_EXECUTABLE} -np ${ranks} --oversubscribe --bind-to none
              --allow-run-as-root $<TARGET_FILE:executor_engine_equivalence> ${flags}
              --model tiny-llama ${strata_equivalence_reference_args} ${args})
    set_tests_properties(${prefix}_${entry} PROPERTIES
      LABELS "${labels}" PROCESSORS 2 TIMEOUT 120 FIXTURES_REQUIRED equivalence_references
      FAIL_REGULAR_EXPRESSION "FAILED|over 1e-4|memory over 5%"
      ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
  endforeach()
endforeach()

# Llama 3.1's rope_scaling (configs/models/tiny-llama-scaled.json: tiny-llama with the three
# frequency bands inside its heads) on TP with SP and PP against one rank: the scaled rotation
# is per row, so any split must give the one-rank losses.
foreach(entry IN ITEMS "t2_2_1_1_1f1b_0_1_0_full_sp")
  strata_equivalence_entry("${entry}" args ranks)
  add_test(NAME executor_engine_equivalence_llama_scaled_${entry}
    COMMAND ${MPIEXEC_EXECUTABLE} -np ${ranks} --oversubscribe --bind-to none
            --allow-run-as-root $<TARGET_FILE:executor_engine_equivalence>
            --model tiny-llama-scaled ${args})
  set_tests_properties(executor_engine_equivalence_llama_scaled_${entry} PROPERTIES
    LABELS "mpi" PROCESSORS 2 TIMEOUT 120
    FAIL_REGULAR_EXPRESSION "FAILED|over 1e-4|memory over 5%"
    ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
endforeach()

# `strata run` end to end (spawns the strata binary, which re-launches itself under mpirun).
strata_add_test(executor_engine_cli_test RUNS_STRATA
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_cli_test.cc
  LIBS strata_cost_model strata_kernels_cpu
  LABELS mpi)

strata_add_test(executor_data_test IN executor_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/data_test.cc
  LIBS strata_executor)

# The CPU losses the CUDA backend is held to (tests/executor/data/cuda_reference_losses.json):
# recomputed here on every run so the file cannot drift from the CPU engine.
strata_add_test(cuda_reference_cpu_test IN executor_engine_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_reference_cpu_test.cc
  LIBS strata_executor)

# The measured trace of a step is the Program's ops in the Program's order (one process).
strata_add_test(executor_engine_trace_test IN executor_engine_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_trace_test.cc
  LIBS strata_executor)

# RankLoop, the one loop of run and select: its evaluation schedule, stop, and results equal
# to the engine's own (one process, < 1 s).
strata_add_test(executor_rank_loop_test IN executor_engine_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/rank_loop_test.cc
  LIBS strata_executor)

# The layer kernel list against a GPT and a Llama step: the kernels called and their uses,
# their FLOPs against the cost model's count (one process, < 1 s).
strata_add_test(executor_layer_kernels_test IN executor_engine_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/layer_kernels_test.cc
  LIBS strata_executor)

# Token files (Megatron, llm.c, bytes) and safetensors: round trips and every corruption.
strata_add_test(executor_data_formats_test IN executor_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/data_formats_test.cc
  LIBS strata_executor)

# Hugging Face Llama weights: the name table, values on every TP rank's slice from F32 and
# BF16 shards, and each error of a sharded checkpoint (< 1 s).
strata_add_test(executor_hf_weights_test IN executor_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/hf_weights_test.cc
  LIBS strata_executor)

# Buffers reused across steps (issue 19): no system allocation after the first step, the
# same losses and per-tag peaks as without reuse, uninitialised memory poisoned.
strata_add_test(executor_engine_arena_test IN executor_engine_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_arena_test.cc
  LIBS strata_executor)

# A seeded run's initial parameters, first losses and gradient norms pinned to the values
# before issue 25's set-up work (where and how parameters are drawn and memory obtained).
strata_add_test(executor_initial_state_test IN executor_engine_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/initial_state_test.cc
  LIBS strata_executor)
# Both pin bits per kernel path: each path CI forces, besides this machine's own.
strata_add_kernel_path_tests(executor_engine_tests "InitialState.*:CudaReference.*")

# Offload plans under the CUDA-semantics mode on one rank: the plain CPU backend's bits, and
# the planted faults behind the H200's offload NaN named by the checker.
strata_add_test(executor_cuda_semantics_offload_test IN executor_engine_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_semantics_offload_test.cc
  LIBS strata_executor)

# Captured steps (CUDA graphs) under the CUDA-semantics mode on one rank: the plain CPU
# backend's bits with the learning rate and clip changing every step, a replay that bakes them
# drifting, the host round trips refused while capturing, a scratch block taken between steps.
strata_add_test(executor_cuda_semantics_graph_test IN executor_engine_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_semantics_graph_test.cc
  LIBS strata_executor)

# The CUDA-semantics CPU mode's scheduler, race checker and pool on their own.
strata_add_test(executor_cuda_semantics_test IN executor_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_semantics_test.cc
  LIBS strata_executor)

# The CPU backend's host stream: the thread the host optimizer runs on beside the backward.
strata_add_test(executor_host_stream_test IN executor_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/host_stream_test.cc
  LIBS strata_executor)
