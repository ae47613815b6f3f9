#!/usr/bin/env bash
# The GPU check in one command that ends by its deadline: the phases of
# tools/device/gpu_phases.sh (GPU unit tests, the CUDA equivalence matrix, calibrate, GPT-2
# predicted beside measured, gpt-8b offload, select, the PyTorch comparison, Llama 3.2 1B on
# both backends and beside PyTorch, compute-sanitizer) in that priority order, each started
# only when its cap still fits before the deadline and stopped when its cap runs out. Writes
#   OUT/summary.txt         one line per phase: name, PASS/FAIL/SKIPPED/NOT RUN, seconds, key
#                           figure; under it a line per failing test case (name, first assertion)
#   OUT/logs.tgz            every log, report and JSON, re-packed after each phase, so that a
#                           run killed midway still brings back what it did
#   OUT/profile-cuda.json   the calibrated profile, when calibrate ran
# and nothing else outside its work directory (a fresh /tmp directory unless --work names one).
#
# Binaries come from a bundle (tools/device/make_bundle.sh's .gpu-bundle.tar.gz, unpacked into
# the work directory; Open MPI comes with it) or from a build tree (--build-dir, default build/,
# with the system's mpirun) when there is no bundle.
#
# Usage: tools/device/gpu_session.sh [--deadline-s S] [--cap PHASE=S ...] [--out DIR] [--work DIR]
#          [--bundle FILE | --build-dir DIR] [--dry-run [--require-cuda-binaries]] [PHASE ...]
#   PHASE ...    a subset of the phases (default all), run in priority order
#   --deadline-s seconds of command time for everything (default 540: with the GPU machine's
#                1-2 minute start, two tries fit in 15 minutes of device time)
#   --dry-run    on any machine, GPU or not: resolves every phase's binaries, configs and
#                input files and prints its commands, starts a 2-rank CPU job under the
#                session's mpirun, and writes the summary (PASS: all resolved) and logs.tgz
#   --require-cuda-binaries  with --dry-run: a missing CUDA test binary fails (a CUDA build)
# Exit codes: 0 every phase that ran passed or skipped; 1 a phase failed or did not fit;
# 2 bad arguments or a missing bundle.
# Deliberately not here: building (tools/device/make_bundle.sh), what a phase runs
# (gpu_phases.sh), retries.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tools/device/targets.sh
source "$repo/tools/device/targets.sh"
# shellcheck source=tools/device/gpu_phases.sh
source "$repo/tools/device/gpu_phases.sh"

die() { echo "gpu_session: $*" >&2; exit 2; }

deadline_s=540 out=${OUT:+$(realpath -m "$OUT")} work="" bundle="" build_dir="" dry=0 require_cuda=0
selected=()
declare -A cap=()
for p in "${gpu_phases[@]}"; do cap[$p]=${gpu_phase_cap[$p]}; done
is_phase() { [[ " ${gpu_phases[*]} " == *" $1 "* ]]; }
while (($#)); do
  case $1 in
    --deadline-s) [[ ${2:-} =~ ^[0-9]+$ ]] || die "--deadline-s '${2:-}': expected whole seconds"
                  deadline_s=$2; shift 2 ;;
    --cap) [[ ${2:-} =~ ^([a-z0-9]+)=([0-9]+)$ ]] && is_phase "${BASH_REMATCH[1]}" ||
             die "--cap '${2:-}': expected PHASE=SECONDS with PHASE one of: ${gpu_phases[*]}"
           cap[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}; shift 2 ;;
    --out) [[ -n ${2:-} ]] || die "--out needs a directory"; out=$(realpath -m "$2"); shift 2 ;;
    --work) [[ -n ${2:-} ]] || die "--work needs a directory"; work=$(realpath -m "$2"); shift 2 ;;
    --bundle) [[ -f ${2:-} ]] || die "--bundle '${2:-}': no such file"; bundle=$(realpath "$2"); shift 2 ;;
    --build-dir) [[ -d ${2:-} ]] || die "--build-dir '${2:-}': no such directory"
                 build_dir=$(realpath "$2"); shift 2 ;;
    --dry-run) dry=1; shift ;;
    --require-cuda-binaries) require_cuda=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) is_phase "$1" || die "unknown phase '$1': expected one of ${gpu_phases[*]}"
       selected+=("$1"); shift ;;
  esac
done
[[ -z $bundle || -z $build_dir ]] || die "--bundle and --build-dir exclude each other"
if [[ -z $bundle && -z $build_dir ]]; then
  if [[ -f $repo/.gpu-bundle.tar.gz ]]; then bundle=$repo/.gpu-bundle.tar.gz; else build_dir=$repo/build; fi
fi
cd "$repo" || exit 2  # the phases name the repository's files relative to it
phases=()  # the selection, in priority order
for p in "${gpu_phases[@]}"; do
  if ((${#selected[@]} == 0)) || [[ " ${selected[*]} " == *" $p "* ]]; then phases+=("$p"); fi
done

work=${work:-$(mktemp -d /tmp/strata-gpu.XXXXXX)}
mkdir -p "$work" || die "cannot create --work '$work'"
work=$(realpath "$work")
out=${out:-$work/out}
mkdir -p "$out" || die "cannot create --out '$out'"
out=$(realpath "$out")
logs=$work/logs
rm -rf "$logs" && mkdir -p "$logs"
summary=$out/summary.txt
: >"$summary"
problems=$logs/problems.txt  # what a dry run found unresolved, one line each
notes=$logs/notes.txt        # what it found absent but expected so (no CUDA build, no GPU tools)
: >"$problems"; : >"$notes"
echo "gpu_session: work directory $work, results in $out, deadline ${deadline_s} s" |
  tee "$logs/session.txt"

pack() {  # logs.tgz from everything under $logs, replaced whole (never half-written)
  tar -czf "$out/logs.tgz.part" -C "$work" logs 2>/dev/null && mv -f "$out/logs.tgz.part" "$out/logs.tgz"
}
phase=""  # the phase under way, for a stop's summary line
on_stop() {  # a TERM or INT: the phase under way gets its line, and the logs are packed
  [[ -n $phase ]] && record "$phase" FAIL $((SECONDS - phase_start)) "stopped by a signal midway"
  cp "$summary" "$logs/summary.txt"
  pack
  exit 1
}
trap on_stop TERM INT

# --- binaries: the bundle's, or the build tree's -------------------------------------------
declare -A BIN=()
if [[ -n $bundle ]]; then
  tar -xzf "$bundle" -C "$work" || die "cannot unpack '$bundle'"
  [[ -d $work/.gpu/bin ]] || die "'$bundle' holds no .gpu/bin (tools/device/make_bundle.sh makes it)"
  source tools/device/env.sh "$work/.gpu"
  for t in "${gpu_session_targets[@]}"; do
    [[ -x $work/.gpu/bin/$t ]] && BIN[$t]=$work/.gpu/bin/$t
  done
  echo "binaries and Open MPI from the bundle $bundle" >>"$logs/session.txt"
else
  for t in "${gpu_session_targets[@]}"; do
    path=$(find "$build_dir" -name "$t" -type f -perm -u+x -print -quit 2>/dev/null)
    [[ -n $path ]] && BIN[$t]=$path
  done
  echo "binaries from the build tree $build_dir, the system's mpirun" >>"$logs/session.txt"
fi
# strata finds its configs here, whatever directory it runs from.
export STRATA_CONFIG_DIR=$repo/configs
# PMIx's compression plugin (zlib) is left out: the bundled PMIx (Debian's 4.2) opened the GPU
# machine's own plugin of another PMIx version under /usr/lib/x86_64-linux-gnu/pmix2 and
# printed its dlopen error ("pmix_mca_pcompress_zlib ... undefined symbol") three lines a
# rank. Excluded by name, the plugin is never opened (PMIx filters a framework's components
# by name before it loads them); without compression only very large launches slow down, and
# the warning that says so is silenced. mpirun passes both to every rank (-x).
export PMIX_MCA_pcompress=^zlib PMIX_MCA_pcompress_base_silence_warning=1
mpirun_path=$(command -v mpirun) || die "no mpirun on PATH (and no bundle with one)"
mpi=("$mpirun_path" --oversubscribe --bind-to none -x PMIX_MCA_pcompress
     -x PMIX_MCA_pcompress_base_silence_warning)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)

# The test binaries read configs/ and tests/ under the source directory they were compiled in,
# and select_cuda_test runs strata at its build path. On a GPU machine where that directory
# does not exist, it becomes a link to a tree of links in the work directory (the repository's
# configs/ and tests/, the bundle's strata at the build path). Never in a dry run, and never
# over anything that exists.
lay_out_built_in() {
  [[ -n $bundle && -f $work/.gpu/built_in ]] || return 0
  local src build farm
  { read -r src; read -r build; } <"$work/.gpu/built_in"
  [[ -e $src ]] && { echo "built-in source directory $src exists: tests read it" >>"$logs/session.txt"; return 0; }
  farm=$work/built_in
  mkdir -p "$farm/${build#"$src"/}/tools/strata"
  ln -s "$repo/configs" "$farm/configs"
  ln -s "$repo/tests" "$farm/tests"
  ln -s "${BIN[strata]}" "$farm/${build#"$src"/}/tools/strata/strata"
  mkdir -p "$(dirname "$src")" && ln -s "$farm" "$src"
  echo "linked $src -> $farm" >>"$logs/session.txt"
}

# --- helpers for the phases (see gpu_phases.sh) ------------------------------------------
problem() { echo "$phase: $*" >>"$problems"; }
note() { echo "$phase: $*" >>"$notes"; }
bin() {  # path of a binary of the session's targets
  if [[ -n ${BIN[$1]:-} ]]; then echo "${BIN[$1]}"; return; fi
  if ((dry)) && [[ $1 != strata ]] && ((!require_cuda)); then
    note "$1 not built here (a build without CUDA)"
  else
    problem "binary $1 not found in ${bundle:-$build_dir}"
  fi
  echo "$1"
}
tool() {  # path of a tool of the GPU machine (compute-sanitizer, nvidia-smi)
  local path
  if path=$(command -v "$1"); then echo "$path"; return; fi
  if ((dry)); then note "$1 not on PATH here (on the GPU machine)"; else problem "$1 not on PATH"; fi
  echo "$1"
}
host_command() {  # path of a command every machine running the check needs (python3)
  command -v "$1" || { problem "$1 not on PATH"; echo "$1"; }
}
input() {  # a file the next command reads: must exist (a relative path is the repository's)
  [[ -f $1 ]] || problem "input file $1 missing"
  echo "$1"
}
cfg() { input "$repo/configs/$1/$2.json"; }

# check_against_ctest BINARY...: in a build tree with ctest, every binary behind a test
# labelled gpu must be one of these (a GPU test added to CMake but not to the check fails
# the dry run).
check_against_ctest() {
  [[ -n $build_dir ]] && command -v ctest >/dev/null || return 0
  local listed missing
  listed=$(ctest --test-dir "$build_dir" -L gpu --show-only=json-v1 2>/dev/null |
           python3 -c 'import json, os, sys
for t in json.load(sys.stdin).get("tests", []):
    for word in t.get("command", []):
        if word.startswith(sys.argv[1]) and os.access(word, os.X_OK):
            print(os.path.basename(word))' "$build_dir" | sort -u)
  missing=$(comm -23 <(echo "$listed") <(printf '%s\n' "$@" | sort -u) | paste -sd' ')
  [[ -z $missing ]] || problem "ctest -L gpu runs binaries this check does not: $missing"
  [[ -n $listed || $require_cuda == 0 ]] || problem "ctest -L gpu lists no binary in this CUDA build"
  echo "  ctest -L gpu's binaries, all run here: $(echo "$listed" | paste -sd' ')" |
    tee -a "$logs/dry-run.txt"
}

stamp() {  # each line prefixed with the seconds since the command began: "[  12.3s] "
  local t0=${EPOCHREALTIME/./} line dt
  while IFS= read -r line || [[ -n $line ]]; do
    dt=$(((${EPOCHREALTIME/./} - t0) / 100000))
    printf '[%5d.%ds] %s\n' $((dt / 10)) $((dt % 10)) "$line"
  done
}

# step [--cpu] [--cap S] [--stdout FILE] LOG CMD...: one command of a phase under what is left
# of its cap (--cap: and at most S seconds, so that one slow command leaves the phase's others
# their time), stamped output in $logs/LOG (with --stdout, its standard output raw into FILE
# instead).
# --cpu: a command that needs no GPU and ends in seconds (predict, plan), which a dry run
# runs too, so that it proves the command's configs and arguments are accepted.
# Returns the command's exit code; 124 when the cap stopped it, 125 when the cap had run out
# before it (not started). A dry run checks that the command resolves and prints it instead.
step() {
  local stdout="" on_cpu=0 step_cap=""
  if [[ $1 == --cpu ]]; then on_cpu=1; shift; fi
  if [[ $1 == --cap ]]; then step_cap=$2; shift 2; fi
  if [[ $1 == --stdout ]]; then stdout=$2; shift 2; fi
  local log=$logs/$1; shift
  if ((dry && on_cpu)); then
    local dry=0 rc
    step ${stdout:+--stdout "$stdout"} "$(basename "$log")" "$@"
    rc=$?
    echo "  \$ $*${stdout:+ >${stdout#"$work"/}}   (needs no GPU: ran, exit code $rc)" | tee -a "$logs/dry-run.txt"
    ((dry_commands++))
    ((rc == 0)) || problem "$(basename "$1") ${2:-} exited $rc (logs/$(basename "$log"))"
    return "$rc"
  fi
  if ((dry)); then
    # bin, tool and host_command resolved bare names already (and said what was missing).
    [[ $1 != */* || -x $1 ]] || problem "command $1 not executable"
    echo "  \$ $*${stdout:+ >${stdout#"$work"/}}" | tee -a "$logs/dry-run.txt"
    ((dry_commands++))
    return 0
  fi
  local left=$((phase_end - SECONDS))
  [[ -n $step_cap ]] && ((step_cap < left)) && left=$step_cap
  echo "\$ $*" >"$log"
  if ((left <= 0)); then echo "not started: the phase's cap ran out" >>"$log"; capped=1; return 125; fi
  local rc
  if [[ -n $stdout ]]; then
    timeout -k 10 "$left" "$@" 2> >(stamp >>"$log") >"$stdout"
    rc=$?
  else
    timeout -k 10 "$left" "$@" 2>&1 | stamp >>"$log"
    rc=${PIPESTATUS[0]}
  fi
  ((rc == 124 || rc == 137)) && capped=1
  echo "exit code $rc" >>"$log"
  return "$rc"
}

# The 2-rank CPU job of a dry run: strata's tiny model for one step under the session's mpirun.
mpi_probed=0
probe_mpi() {
  mpi_probed=1
  local dir=$work/mpi-probe
  local cmd=("${mpi[@]}" -np 2 "$(bin strata)" run --backend cpu --threads 1 --steps 1
             --plan "$(cfg plans tiny-dp2)" --model "$(cfg models tiny)" --train "$(cfg train tiny)"
             --cluster "$(cfg clusters local-cpu)" --out "$dir")
  local dry=0  # seen by step: this one command runs, under the phase's cap
  step mpi-probe.log "${cmd[@]}"
  local rc=$?
  echo "  \$ ${cmd[*]}   (a 2-rank CPU job under this mpirun: ran, exit code $rc)" | tee -a "$logs/dry-run.txt"
  if ((rc != 0)) || [[ $(cat "$dir/metrics.jsonl" 2>/dev/null | wc -l) != 1 ]]; then
    problem "the 2-rank job under $mpirun_path failed (exit code $rc; logs/mpi-probe.log)"
  elif grep -q 'compression' "$logs/mpi-probe.log"; then
    problem "mpirun still prints PMIx's compression warning (logs/mpi-probe.log)"
  else
    echo "  2 ranks ran one step: $(head -c 120 "$dir/metrics.jsonl")" | tee -a "$logs/dry-run.txt"
  fi
  cp "$dir/metrics.jsonl" "$logs/mpi-probe.metrics.jsonl" 2>/dev/null
}

mpi_step() {  # mpi_step LOG NP CMD...: step under the session's mpirun with NP ranks
  local log=$1 np=$2; shift 2
  ((dry && !mpi_probed)) && probe_mpi
  step "$log" "${mpi[@]}" -np "$np" "$@"
}

record() {  # record NAME STATUS SECONDS FIGURE: the phase's line of the summary
  printf '%-12s %-8s %5ss  %s\n' "$1" "$2" "$3" "$4" | tee -a "$summary"
}

# --- the session -----------------------------------------------------------------------------
if ((dry)); then
  echo "dry run: nothing runs on a GPU; each phase's commands follow" | tee -a "$logs/dry-run.txt"
else
  lay_out_built_in
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader \
      >"$logs/gpu.txt" 2>&1
  else
    echo "no nvidia-smi on PATH: the GPU phases will skip or fail" >"$logs/gpu.txt"
  fi
  cat "$logs/gpu.txt"
fi
any_failed=0
for phase in "${phases[@]}"; do
  left=$((deadline_s - SECONDS))
  if ((cap[$phase] > left)); then
    record "$phase" "NOT RUN" 0 "(deadline: its cap is ${cap[$phase]} s, ${left} s were left)"
    phase="" any_failed=1
    continue
  fi
  ((dry)) && echo "$phase (cap ${cap[$phase]} s):" | tee -a "$logs/dry-run.txt"
  phase_start=$SECONDS phase_end=$((SECONDS + cap[$phase])) capped=0 STATUS=FAIL FIGURE="" DETAILS="" dry_commands=0
  problems_before=$(wc -l <"$problems")
  "phase_$phase"
  found=$(($(wc -l <"$problems") - problems_before))
  if ((dry)); then
    STATUS=PASS FIGURE="dry run: $dry_commands commands resolved"
    if ((found)); then STATUS=FAIL FIGURE="dry run: $(grep "^$phase: " "$problems" | cut -d' ' -f2- | sort -u | paste -sd';')"; fi
  elif ((found)); then
    STATUS=FAIL FIGURE="$FIGURE [$(grep "^$phase: " "$problems" | cut -d' ' -f2- | sort -u | paste -sd';')]"
  fi
  ((capped)) && STATUS=FAIL FIGURE="cap of ${cap[$phase]} s reached; $FIGURE"
  [[ $STATUS == FAIL ]] && any_failed=1
  record "$phase" "$STATUS" $((SECONDS - phase_start)) "$FIGURE"
  # One line per failing test case under the phase's (gpu_phases.sh's DETAILS).
  [[ -n $DETAILS ]] && printf '%s' "$DETAILS" | sed '/^$/d; s/^/    /' | tee -a "$summary"
  phase=""
  cp "$summary" "$logs/summary.txt"
  pack
done
if ((dry)) && [[ -s $notes ]]; then sed 's/^/note: /' "$notes" | sort -u; fi
pack
exit "$any_failed"
