# The loop's last two steps: `strata compare` (cost_model/compare) and `strata calibrate`
# (executor/calibrate), as libraries and through the CLI binary.
strata_add_test(compare_test
  SOURCES ${PROJECT_SOURCE_DIR}/tests/cost_model/compare_test.cc
  LIBS strata_specs)

strata_add_test(calibrate_test
  SOURCES ${PROJECT_SOURCE_DIR}/tests/executor/calibrate_test.cc
  LIBS strata_executor)

# Runs the strata binary: error exits, and a quick calibration with a 2-rank mpirun job and
# a 64 MiB NVMe probe (~6 s on the 2-core dev machine).
strata_add_test(loop_cli_test RUNS_STRATA
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/loop_cli_test.cc
  LIBS strata_specs)

# `strata calibrate --backend cuda` as a library on a GPU (executor/calibrate/cuda_*):
# GTEST_SKIPs without a device (label gpu: `ctest -LE gpu` is the CPU set).
if(STRATA_HAVE_CUDA)
  strata_add_test(calibrate_cuda_gpu_test
    SOURCES ${PROJECT_SOURCE_DIR}/tests/executor/calibrate_cuda_gpu_test.cc
    LIBS strata_calibrate_cuda
    LABELS gpu)
endif()
