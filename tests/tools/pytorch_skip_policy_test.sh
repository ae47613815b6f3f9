#!/usr/bin/env bash
# tools/check_against_pytorch.py (or a script that applies its rule, such as
# tools/bench/pytorch_llama.py) without torch: skipped (exit 77) on a developer's machine,
# failed (exit 1) under CI=true, where tools/install_deps.sh installs torch and its absence
# is a broken install (issue 29). torch is hidden by a module of that name earlier on
# PYTHONPATH whose import fails, as a missing package's does.
# Usage: pytorch_skip_policy_test.sh PYTHON CHECK_SCRIPT [ARGUMENTS...]
#   ARGUMENTS: the script's (default --strata /nonexistent, check_against_pytorch.py's)
set -uo pipefail
python=$1 script=$2
shift 2
args=("$@")
((${#args[@]})) || args=(--strata /nonexistent)
hide=$(mktemp -d)
trap 'rm -rf "$hide"' EXIT
echo 'raise ImportError("torch hidden by pytorch_skip_policy_test.sh")' >"$hide/torch.py"
failures=0
expect() {  # expect WHAT RC PATTERN CI_VALUE
  local out rc ci=(-u CI)
  [[ -n $4 ]] && ci=("CI=$4")
  out=$(env "${ci[@]}" PYTHONPATH="$hide" "$python" "$script" "${args[@]}" 2>&1)
  rc=$?
  if [[ $rc == "$2" ]] && grep -q "$3" <<<"$out"; then
    echo "ok: $1 (exit $rc)"
  else
    echo "FAIL: $1: expected exit $2 and '$3', got exit $rc: $out"
    failures=$((failures + 1))
  fi
}
expect "no CI variable: skipped" 77 '^SKIP: torch is not importable' ""
expect "CI=false: skipped" 77 '^SKIP: torch is not importable' false
expect "CI=true: failed" 1 '^FAIL: torch is not importable' true
((failures == 0)) && echo PASSED
exit $((failures > 0))
