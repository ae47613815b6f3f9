#!/usr/bin/env bash
# How the GPU check reads a test binary's log (tools/device/gpu_phases.sh's gtest_counts and
# gtest_failures), on logs of the H200 session of 2026-11-28 (tests/tools/data/gtest_logs):
# under --gtest_brief=1 gtest prints no "N tests, listed below" line, and the check once read
# "35 passed, 0 failed" for a cuda_kernels_test run that failed 2 cases. Each failing case must
# give one line with its name and its first failing assertion (< 1 s).
# Usage: gpu_phases_parse_test.sh SOURCE_DIR
set -uo pipefail
src=$1
# shellcheck source=tools/device/gpu_phases.sh
source "$src/tools/device/gpu_phases.sh"
data=$src/tests/tools/data/gtest_logs
failures=0
check() {  # check WHAT EXPECTED ACTUAL
  if [[ $2 == "$3" ]]; then echo "ok: $1"; else echo "FAIL: $1: expected '$2', got '$3'"; failures=$((failures + 1)); fi
}
# Brief output, stamped by the check's step(): 37 ran, 35 passed, 2 failed.
check "brief: the counts" "35 passed, 0 skipped, 2 failed" "$(gtest_counts "$data/brief_two_failures.log")"
lines=$(gtest_failures "$data/brief_two_failures.log")
check "brief: one line per failing case" 2 "$(wc -l <<<"$lines")"
check "brief: the first case's name and assertion" \
  "Shapes/CudaGqaAttention.ForwardAndBackwardMatchCpuTwin/HS128_B2_T70_NH4_KVH1: tests/kernels/cuda_gqa_attention_test.cc:92: Value of: all_close(\"dqkv\", from_device_bf16(d_dqkv, s.qkv_size()), dqkv, 3e-2, 2e-2)" \
  "$(sed -n 1p <<<"$lines")"
check "brief: the second case's assertion" \
  "Shapes/CudaGqaAttention.ForwardAndBackwardMatchCpuTwin/HS128_B1_T1_NH8_KVH2: tests/kernels/cuda_gqa_attention_test.cc:107: Expected: (worst_relative_norm(overwritten, fresh, s)) <= (1e-2), actual: 1.90961 vs 0.01" \
  "$(sed -n 2p <<<"$lines")"
# Full output (each failure twice: where it happened and in the closing list): four cases.
check "full: the counts" "0 passed, 0 skipped, 4 failed" "$(gtest_counts "$data/full_four_failures.log")"
lines=$(gtest_failures "$data/full_four_failures.log")
check "full: one line per failing case, the closing list not counted again" 4 "$(wc -l <<<"$lines")"
check "full: the parameter's bytes are left out of the name" \
  "OneGpuMatrix/CudaEngineTest.LossesAndNormsMatchTheCpuBackendWithinBf16Tolerance/10" \
  "$(sed -n 4p <<<"$lines" | cut -d: -f1)"
# Under mpirun, coloured, a rank's exception: 5 ran, 4 passed, 1 failed on rank 1.
check "mpi: the counts" "4 passed, 0 skipped, 1 failed" "$(gtest_counts "$data/mpi_rank_exception.log")"
check "mpi: the rank's exception" \
  "HostStagedTest.FactoryGroupsMatchTheRankListsAndSumLikeMpi: [rank 1] ?:-1: C++ exception with description \"GroupStreams::of: no stream for pipeline link 2\" thrown in the test body." \
  "$(gtest_failures "$data/mpi_rank_exception.log")"
# A rank's fatal failure that ended the job (tests/executor/mpi_test_main.h): no FAILED line
# from gtest, the abort's own line names the case.
check "aborted: the rank's case and assertion" \
  "MpiAbortProbe.RankOneFailsAnAssertionWhileRankZeroWaits: [rank 1] ../tests/executor/mpi_abort_probe.cc:30: Expected equality of these values:" \
  "$(gtest_failures "$data/mpi_rank_aborted.log")"
check "aborted: counted as failed" "0 passed, 0 skipped, 1 failed" "$(gtest_counts "$data/mpi_rank_aborted.log")"
# A binary killed before its end: nothing counted, no line.
check "a missing log counts nothing" "0 passed, 0 skipped, 0 failed" "$(gtest_counts "$data/none.log")"
exit $((failures > 0))
