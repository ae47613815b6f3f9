# tools/device/gpu_session.sh --dry-run, on the CPU: every phase's binaries, configs and inputs
# resolved, a 2-rank CPU job under the session's mpirun, one summary line per phase, a valid
# logs.tgz, the deadline's NOT RUN lines, bad arguments exit 2, and the source and build trees
# left as they were (~10 s). With CUDA in this build, every CUDA binary must be there too.
if(STRATA_HAVE_CUDA)
  set(strata_gpu_session_require_cuda 1)
else()
  set(strata_gpu_session_require_cuda 0)
endif()
add_test(NAME tools.gpu_session_dry_run
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/tools/gpu_session_dry_run_test.sh
          ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR} ${strata_gpu_session_require_cuda})
set_tests_properties(tools.gpu_session_dry_run PROPERTIES
  LABELS "mpi;tools" PROCESSORS 2 TIMEOUT 120
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
# The llama phase's verdict (tools/device/backend_parity.py) on made-up runs: the bf16 bounds
# by step, a loss that does not fall, NaN, short and missing runs, the tokens/s ratio (< 1 s).
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME tools.backend_parity
    COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/tests/tools/backend_parity_test.py
            ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/device/backend_parity.py)
  set_tests_properties(tools.backend_parity PROPERTIES LABELS tools TIMEOUT 30)
endif()
# How the check reads a test binary's log (gpu_phases.sh's gtest_counts and gtest_failures) on
# the H200's logs: failures counted under --gtest_brief=1, one line per failing case (< 1 s).
add_test(NAME tools.gpu_phases_reads_test_logs
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/tools/gpu_phases_parse_test.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(tools.gpu_phases_reads_test_logs PROPERTIES LABELS tools TIMEOUT 30)
# The offload phase's verdict (tools/device/offload_verdict.py) on made-up comparisons and
# logs: the first-step, step-time and device-memory bounds, missing and stopped runs (< 1 s).
if(Python3_Interpreter_FOUND)
  add_test(NAME tools.offload_verdict
    COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/tests/tools/offload_verdict_test.py
            ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/device/offload_verdict.py)
  set_tests_properties(tools.offload_verdict PROPERTIES LABELS tools TIMEOUT 30)
endif()
# The speed phase's verdict and table (tools/device/speed_table.py) on made-up runs: the ratio,
# targets and MFU floors, missing sides, the side-by-side top ops (< 1 s).
if(Python3_Interpreter_FOUND)
  add_test(NAME tools.speed_table
    COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/tests/tools/speed_table_test.py
            ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/device/speed_table.py)
  set_tests_properties(tools.speed_table PROPERTIES LABELS tools TIMEOUT 30)
endif()
