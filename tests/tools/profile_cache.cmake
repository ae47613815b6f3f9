# Calibrated by default (tools/strata/profile_cache.h, profile_choice.h), through the binary:
# the per-machine cache that `strata calibrate` fills and the pricing commands read (~30 s on
# the 2-core dev machine: two quick calibrations, two one-step runs), and the bundled H200
# profile's GPU predictions against what that GPU measured (a few seconds, no GPU needed).
strata_add_test(profile_cache_cli_test RUNS_STRATA
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/profile_cache_cli_test.cc
  LIBS strata_specs)

strata_add_test(bundled_gpu_profile_test RUNS_STRATA
  SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/bundled_gpu_profile_test.cc
  LIBS strata_specs)
