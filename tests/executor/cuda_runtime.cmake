# CUDA backend runtime (executor/cuda, executor/runtime/backend_select):
# - cuda_runtime_select_test: choose_backend with injected probes; plain C++, every build;
# - cuda_runtime_host_test: host-side checks of the pool, pinned buffers, block layout, probe
#   and error translation; needs the toolkit, not a GPU;
# - cuda_runtime_gpu_test: pool/pinned/streams/rank-ordered sum/1-rank NCCL; GTEST_SKIPs
#   without a device (label gpu: `ctest -LE gpu` is the CPU set);
# - cuda_runtime_nccl_mpi_np{2,4}: NcclCommunicator (typed) and its factory under mpirun, one
#   GPU per rank; exits 77 (reported SKIPPED) when the node has fewer GPUs than ranks;
# - cuda_runtime_host_staged_mpi_np{2,4}: HostStagedCommunicator and its factory under mpirun,
#   every rank on device 0; exits 77 (SKIPPED) without a device.
strata_add_test(cuda_runtime_select_test IN executor_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_runtime_select_test.cc
  LIBS strata_executor)

if(STRATA_HAVE_CUDA)
  strata_add_test(cuda_runtime_host_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_runtime_host_test.cc
    LIBS strata_executor_cuda)
  strata_add_test(cuda_runtime_gpu_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_runtime_gpu_test.cc
    LIBS strata_executor_cuda
    LABELS gpu)

  # NCCL_LIBRARY / NCCL_INCLUDE_DIR: cache results of executor/cuda/CMakeLists.txt.
  if(NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
    add_executable(cuda_runtime_nccl_mpi_test
      ${CMAKE_CURRENT_LIST_DIR}/cuda_runtime_nccl_mpi_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/cuda_runtime_nccl_typed_mpi_test.cc)
    target_link_libraries(cuda_runtime_nccl_mpi_test PRIVATE strata_executor_cuda GTest::gtest
      strata_warnings)
    foreach(ranks 2 4)
      add_test(NAME cuda_runtime_nccl_mpi_np${ranks}
        COMMAND ${MPIEXEC_EXECUTABLE} -np ${ranks} --oversubscribe --bind-to none
                --allow-run-as-root $<TARGET_FILE:cuda_runtime_nccl_mpi_test>)
      set_tests_properties(cuda_runtime_nccl_mpi_np${ranks} PROPERTIES
        LABELS "gpu;mpi" SKIP_RETURN_CODE 77 TIMEOUT 120)
    endforeach()
  endif()

  add_executable(cuda_runtime_host_staged_mpi_test
    ${CMAKE_CURRENT_LIST_DIR}/cuda_runtime_host_staged_mpi_test.cc)
  target_link_libraries(cuda_runtime_host_staged_mpi_test PRIVATE strata_executor_cuda
    GTest::gtest strata_warnings)
  foreach(ranks 2 4)
    add_test(NAME cuda_runtime_host_staged_mpi_np${ranks}
      COMMAND ${MPIEXEC_EXECUTABLE} -np ${ranks} --oversubscribe --bind-to none
              --allow-run-as-root $<TARGET_FILE:cuda_runtime_host_staged_mpi_test>)
    set_tests_properties(cuda_runtime_host_staged_mpi_np${ranks} PROPERTIES
      LABELS "gpu;mpi" SKIP_RETURN_CODE 77 TIMEOUT 120)
  endforeach()
endif()

# The CUDA engine against the CPU backend's losses (cuda_reference.h); GTEST_SKIPs without a
# device, except the plan checks, which run everywhere the toolkit is.
if(STRATA_HAVE_CUDA)
  strata_add_test(cuda_engine_gpu_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_engine_gpu_test.cc
    LIBS strata_executor_cuda
    LABELS gpu)
endif()

# The equivalence matrix on the CUDA backend: every process of a plan shares the one GPU
# (--ranks-per-gpu, host-staged communicators), against the CPU single-rank losses within
# bf16 tolerance. Up to 4 processes; exit code 77 (skipped) without a device, asked of the
# binary alone (--gpu-present) before mpiexec starts any rank: each entry holds both cores
# of a CI machine while it runs, and starting 2-4 ranks to find no GPU took ~1.2 s a plan.
if(STRATA_HAVE_CUDA)
  add_executable(cuda_engine_equivalence ${CMAKE_CURRENT_LIST_DIR}/engine_equivalence_main.cc)
  target_link_libraries(cuda_engine_equivalence PRIVATE strata_executor_cuda strata_warnings)
  target_compile_definitions(cuda_engine_equivalence PRIVATE
    STRATA_SOURCE_DIR="${PROJECT_SOURCE_DIR}" STRATA_EQUIVALENCE_CUDA=1)
  # Each entry's construction check (--check: no GPU, no MPI; every machine with the CUDA
  # toolkit, CI included): what its GPU run builds -- model, plan, every rank's engine on the
  # CUDA backend without a GPU -- so that an entry no GPU run could start fails here first
  # (all 22 GPT entries once did: kv_heads 4 beside 2 heads). ~0.1-0.5 s each.
  function(strata_cuda_equivalence_check name flags)
    add_test(NAME cuda_engine_equivalence_check_${name}
      COMMAND cuda_engine_equivalence --check ${flags} ${ARGN})
    set_tests_properties(cuda_engine_equivalence_check_${name} PROPERTIES
      TIMEOUT 60 PASS_REGULAR_EXPRESSION "^CHECKED: ")
  endfunction()
  foreach(entry
      "t2_1_1_1_1f1b_0_2_0" "t1_2_1_2_interleaved_0_1_0" "t1_4_1_2_interleaved_0_2_0"
      "t1_1_2_1_1f1b_1_1_0" "t1_1_2_1_gpipe_2_4_0" "t1_1_2_1_1f1b_3_2_0" "t2_2_1_1_1f1b_0_1_0"
      "t2_1_2_1_1f1b_3_1_0" "t1_2_2_2_interleaved_1_1_0" "t2_1_1_1_1f1b_0_2_0_none_sp"
      "t2_2_1_1_1f1b_0_1_0_full_sp" "t1_2_2_2_interleaved_2_1_0_full"
      "t1_1_2_1_1f1b_3_2_0_none_nosp_cpu" "t1_2_1_1_1f1b_2_1_0_none_nosp_cpu"
      # The combinations the entries above miss (issue 29), up to 4 processes: clipping with
      # TP, GPipe over 2 stages with selective recomputation, ZeRO-3 with PP, SP with DP,
      # TP with interleaving, uneven stages, the NVMe tier (t, p and d all above 1 needs 8).
      "t2_1_1_1_1f1b_0_4_0.05" "t1_2_1_1_gpipe_1_2_0.05_selective" "t1_2_2_1_1f1b_3_1_0"
      "t2_1_2_1_gpipe_3_1_0_selective_sp" "t2_2_1_2_interleaved_0_1_0.05_selective_sp"
      "t1_3_1_1_1f1b_0_1_0_none_nosp_none_2..3" "t1_1_2_1_1f1b_3_1_0_selective_nosp_nvme")
    strata_equivalence_entry("${entry}" args ranks)
    string(REPLACE ";" " " args_line "${args}")
    add_test(NAME cuda_engine_equivalence_${entry}
      COMMAND sh -c "\"$<TARGET_FILE:cuda_engine_equivalence>\" --gpu-present && exec \"${MPIEXEC_EXECUTABLE}\" -np ${ranks} --oversubscribe --bind-to none --allow-run-as-root \"$<TARGET_FILE:cuda_engine_equivalence>\" ${args_line}")
    strata_cuda_equivalence_check("${entry}" "" ${args})
    set_tests_properties(cuda_engine_equivalence_${entry} PROPERTIES
      LABELS "gpu;mpi" PROCESSORS 2 TIMEOUT 300 SKIP_RETURN_CODE 77
      FAIL_REGULAR_EXPRESSION "FAILED|over 1e-4")
  endforeach()
  # The tiny Llama (heads widened to 64 on CUDA: engine_equivalence_main.cc) on TP, PP with
  # interleaving, ZeRO-3 with SP and selective recomputation, and t4 (its 2 KV heads
  # replicated over TP, each on 2 ranks). Unquoted, so that
  # tools/device/gpu_phases.sh, which runs the quoted GPT entries above without --model,
  # does not read them as GPT plans.
  foreach(entry IN ITEMS t2_1_1_1_1f1b_0_2_0 t1_2_1_2_interleaved_0_1_0
                         t2_1_2_1_gpipe_3_1_0_selective_sp t4_1_1_1_1f1b_0_2_0)
    strata_equivalence_entry("${entry}" args ranks)
    string(REPLACE ";" " " args_line "${args}")
    strata_cuda_equivalence_check("llama_${entry}" "--model;tiny-llama" ${args})
    add_test(NAME cuda_engine_equivalence_llama_${entry}
      COMMAND sh -c "\"$<TARGET_FILE:cuda_engine_equivalence>\" --gpu-present && exec \"${MPIEXEC_EXECUTABLE}\" -np ${ranks} --oversubscribe --bind-to none --allow-run-as-root \"$<TARGET_FILE:cuda_engine_equivalence>\" --model tiny-llama ${args_line}")
    set_tests_properties(cuda_engine_equivalence_llama_${entry} PROPERTIES
      LABELS "gpu;mpi" PROCESSORS 2 TIMEOUT 300 SKIP_RETURN_CODE 77
      FAIL_REGULAR_EXPRESSION "FAILED|over 1e-4")
  endforeach()
  # NCCL's communicators (--nccl: one GPU a rank) on TP, PP, ZeRO-3 over DP, and TP with PP
  # and SP: skipped (77, with the reason) on a machine with fewer GPUs than the plan's ranks,
  # asked before mpirun starts any (--gpu-present RANKS).
  # Unquoted and after the Llama list, which gpu_phases.sh reads first, for the same reason.
  foreach(entry IN ITEMS t2_1_1_1_1f1b_0_2_0 t1_2_1_1_1f1b_0_1_0 t1_1_2_1_1f1b_3_2_0
                         t2_2_1_1_1f1b_0_1_0_full_sp)
    strata_equivalence_entry("${entry}" args ranks)
    string(REPLACE ";" " " args_line "${args}")
    strata_cuda_equivalence_check("nccl_${entry}" "--nccl" ${args})
    add_test(NAME cuda_engine_equivalence_nccl_${entry}
      COMMAND sh -c "\"$<TARGET_FILE:cuda_engine_equivalence>\" --gpu-present ${ranks} && exec \"${MPIEXEC_EXECUTABLE}\" -np ${ranks} --oversubscribe --bind-to none --allow-run-as-root \"$<TARGET_FILE:cuda_engine_equivalence>\" --nccl ${args_line}")
    set_tests_properties(cuda_engine_equivalence_nccl_${entry} PROPERTIES
      LABELS "gpu;mpi" PROCESSORS 2 TIMEOUT 300 SKIP_RETURN_CODE 77
      FAIL_REGULAR_EXPRESSION "FAILED|over 1e-4")
  endforeach()
endif()
