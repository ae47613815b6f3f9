#!/usr/bin/env bash
# tools/device/gpu_session.sh --dry-run on a machine without a GPU (CI): it must resolve every
# phase, start a 2-rank CPU job under its mpirun, write one summary line per phase in
# priority order and a valid logs.tgz, leave out what does not fit the deadline with a
# NOT RUN line, refuse bad arguments with exit 2 before writing anything, and change nothing
# outside its scratch directory (issue 25: the former script linked build/tools/strata/strata
# into its bundle wherever it ran).
# Usage: gpu_session_dry_run_test.sh SOURCE_DIR BUILD_DIR REQUIRE_CUDA(0|1)
set -uo pipefail
src=$1 build=$2 require_cuda=$3
session=$src/tools/device/gpu_session.sh
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0
check() {  # check WHAT COMMAND...: one assertion
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; failures=$((failures + 1)); fi
}
# The phases in the priority order issue 25 gives them, with issue 26's llama after pytorch
# and issue 41's speed after gpt2.
expected_phases="tests equivalence calibrate gpt2 speed offload select pytorch llama sanitize"
dry=(--dry-run --build-dir "$build")
((require_cuda)) && dry+=(--require-cuda-binaries)

# What the run must leave as it is: the source tree's status (ignored files included: a
# bundle unpacked into .gpu/ shows) and the strata binary (a link put in its place changes
# its type and inode).
snapshot() {
  if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$src" status --porcelain --ignored
  else
    ls -A "$src"
  fi
  stat -c '%n %F %i %Y' "$build/tools/strata/strata"
}
before=$(snapshot)

# 1. The whole dry run.
out=$scratch/out work=$scratch/work
bash "$session" "${dry[@]}" --out "$out" --work "$work" >"$scratch/run.log" 2>&1
rc=$?
check "the dry run exits 0 (got $rc; its output is below on failure)" test "$rc" -eq 0
((rc == 0)) || cat "$scratch/run.log"
names=$(awk '{print $1}' "$out/summary.txt" 2>/dev/null | paste -sd' ')
check "summary.txt has one line per phase, in priority order (got: $names)" \
  test "$names" == "$expected_phases"
check "every phase resolved (PASS)" test "$(grep -vc ' PASS ' "$out/summary.txt")" -eq 0
check "logs.tgz is a valid gzip tarball holding the dry run's log" tar -tzf "$out/logs.tgz" logs/dry-run.txt >/dev/null
check "the 2-rank CPU job ran one step under the session's mpirun" \
  bash -c "tar -xOzf '$out/logs.tgz' logs/mpi-probe.metrics.jsonl | grep -q '\"step\":1'"
check "only summary.txt and logs.tgz come back" test "$(ls "$out" | paste -sd' ')" == "logs.tgz summary.txt"

# 2. Three phases under a deadline of 50 s that holds the first one's cap (set to 30 s) and
# neither of the others' (110 s and 150 s): one ran, two NOT RUN lines, exit code 1 (not
# all ran). Phases without mpirun, so that only run 1 pays for an MPI job.
bash "$session" "${dry[@]}" --deadline-s 50 --cap calibrate=30 calibrate gpt2 offload \
  --out "$scratch/out2" --work "$scratch/work2" >/dev/null 2>&1
rc=$?
check "a short deadline exits 1 (got $rc)" test "$rc" -eq 1
check "the first phase ran under the short deadline" grep -q '^calibrate  *PASS ' "$scratch/out2/summary.txt"
check "the two others are NOT RUN lines naming the deadline" \
  test "$(grep -c '^\(gpt2\|offload\)  *NOT RUN .*(deadline' "$scratch/out2/summary.txt")" -eq 2

# 3. Phases chosen by name run in priority order whatever order they are named in.
bash "$session" "${dry[@]}" sanitize llama calibrate --out "$scratch/out3" --work "$scratch/work3" >/dev/null 2>&1
check "named phases only, in priority order" \
  test "$(awk '{print $1}' "$scratch/out3/summary.txt" | paste -sd' ')" == "calibrate llama sanitize"

# 4. Bad arguments: exit 2, a message naming the value, nothing written.
for bad in "--deadline-s soon" "--cap tests=fast" "--cap nosuch=5" "nosuch" "--frobnicate"; do
  # shellcheck disable=SC2086  # the words of $bad are the arguments
  msg=$(bash "$session" "${dry[@]}" $bad --out "$scratch/bad" --work "$scratch/badwork" 2>&1)
  rc=$?
  check "'$bad' is exit 2 (got $rc: $msg)" test "$rc" -eq 2
  check "'$bad' names what is wrong" grep -q -- "${bad##* }" <<<"$msg"
done
check "bad arguments wrote nothing" test ! -e "$scratch/bad" -a ! -e "$scratch/badwork"

# 5. Nothing outside the scratch directories changed.
after=$(snapshot)
check "the source tree and the strata binary are unchanged" test "$before" == "$after"
((failures == 0)) || { diff <(echo "$before") <(echo "$after"); exit 1; }
echo PASSED
