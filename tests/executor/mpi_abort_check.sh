#!/usr/bin/env bash
# A rank that stops its test early ends the whole job, promptly, saying why
# (tests/executor/mpi_test_main.h; the probe is mpi_abort_probe.cc):
#   mpi_abort_check.sh MPIEXEC PROBE TEST_NAME EXPECTED_MESSAGE
# runs PROBE's TEST_NAME under `MPIEXEC -np 2` with a 60 s cap and fails unless the job exits
# nonzero, by itself (not by the cap), within 30 s, printing EXPECTED_MESSAGE. Without the
# abort the probe's rank 0 waits in a barrier forever, and the cap ends it (exit code 124).
set -uo pipefail
mpiexec=$1 probe=$2 test_name=$3 expected=$4
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$SECONDS
timeout -k 5 60 "$mpiexec" -np 2 --oversubscribe --bind-to none --allow-run-as-root \
  "$probe" --gtest_filter="MpiAbortProbe.$test_name" >"$log" 2>&1
rc=$?
elapsed=$((SECONDS - start))
cat "$log"
fail() { echo "mpi_abort_check: $*" >&2; exit 1; }
((rc != 124 && rc != 137)) || fail "the job hung: the 60 s cap ended it"
((rc != 0)) || fail "the job exited 0: a rank's failure was lost"
((elapsed <= 30)) || fail "the job took ${elapsed} s to end (at most 30 expected)"
grep -qF -- "$expected" "$log" || fail "the output does not say '$expected'"
grep -qF -- "ending the job (MPI_Abort" "$log" || fail "the output does not say that the job was ended"
echo "mpi_abort_check: $test_name ended the job in ${elapsed} s with exit code $rc and the message"
