#!/usr/bin/env bash
# Everything a session with a lent GPU runs, in one device call (device time is 30 min a
# session): the GPU tests, the CUDA equivalence matrix under the bundled mpirun, the
# calibration, GPT-2 runs predicted beside measured, the 8B offload run, and the PyTorch
# comparison. Build and pack first, on the CPU machine: tools/device/make_bundle.sh, then
# call the device tool with
#   command: bash tools/device/gpu_session.sh [phase ...]     carry: [".gpu-bundle.tar.gz"]
# Phases (default: tests mpi equivalence calibrate gpt2 offload select): tests, mpi,
# equivalence, sanitize, calibrate, gpt2, offload, select, pytorch. Logs and reports go to $OUT (the
# device tool brings them back), one line per check in $OUT/summary.txt.
# Deliberately not here: building (no compilers' dependencies on the lent machine), retries.
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
summary=$out/summary.txt
[[ -d .gpu ]] || tar -xzf .gpu-bundle.tar.gz
source tools/device/env.sh .gpu
# The test binaries look for configs/ and tests/ under the source directory they were built
# in (/work/main on the CPU machine): point it here.
built_in=/work/main
if [[ ! -e $built_in ]]; then mkdir -p "$(dirname "$built_in")" && ln -sfn "$PWD" "$built_in"; fi
export STRATA_CONFIG_DIR="$PWD/configs"
# ... and for the strata binary at its build path (select_cuda_test runs it).
mkdir -p build/tools/strata && ln -sf "$PWD/.gpu/bin/strata" build/tools/strata/strata
mpi=(mpirun --oversubscribe --bind-to none --allow-run-as-root)

record() {  # record NAME STATUS [DETAIL]: one line of the summary
  printf '%-48s %s %s\n' "$1" "$2" "${3:-}" | tee -a "$summary"
}
status_of() {  # an exit code in words (77: the test skipped itself, e.g. no device)
  case $1 in 0) echo ok ;; 77) echo skipped ;; *) echo "FAILED rc=$1" ;; esac
}
gtest() {  # gtest NAME [ARGS]: one test binary, its log, pass/fail in the summary
  local name=$1; shift
  local log=$out/$name.log
  timeout 600 "$name" --gtest_brief=1 "$@" >"$log" 2>&1
  local rc=$?
  record "$name" "$(status_of $rc)" \
    "$(grep -Eo '[0-9]+ tests?, listed below|PASSED  \] [0-9]+ tests?|SKIPPED \] [0-9]+ tests?' "$log" | tr '\n' ' ')"
}

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader |
  tee "$out/gpu.txt"
for phase in ${*:-tests mpi equivalence calibrate gpt2 offload select}; do
  case $phase in
    tests)
      for t in cuda_kernels_test cuda_runtime_gpu_test cuda_vocab_parallel_loss_test \
               cuda_engine_gpu_test select_cuda_test calibrate_cuda_gpu_test; do gtest "$t"; done
      ;;
    mpi)
      for n in 2 4; do
        timeout 300 "${mpi[@]}" -np "$n" cuda_runtime_host_staged_mpi_test --gtest_brief=1 \
          >"$out/host_staged_np$n.log" 2>&1
        record "host_staged_np$n" "$(status_of $?)"
      done
      # NCCL between processes of one GPU is not supported: expect a skip (rc 77) with one GPU.
      timeout 300 "${mpi[@]}" -np 2 cuda_runtime_nccl_mpi_test --gtest_brief=1 \
        >"$out/nccl_np2.log" 2>&1
      record "nccl_np2" "$(status_of $?)"
      ;;
    equivalence)
      # The entries of the ctest matrix, from its one definition.
      for entry in $(grep -Eo '"t[0-9]+_[0-9a-z_]+"' tests/executor/cuda_runtime.cmake | tr -d '"'); do
        IFS=_ read -r -a args <<<"${entry#t}"
        ranks=$((args[0] * args[1] * args[2]))
        log=$out/equivalence_$entry.log
        timeout 300 "${mpi[@]}" -np "$ranks" cuda_engine_equivalence "${args[@]}" >"$log" 2>&1
        rc=$?
        status=$(status_of $rc)
        if [[ $rc == 0 ]] && grep -Eq 'FAILED|over 1e-4' "$log"; then status="FAILED (see log)"; fi
        record "equivalence $entry" "$status" "$(grep -Eo 'worst[^,;]*' "$log" | head -1)"
      done
      ;;
    sanitize)
      compute-sanitizer --tool memcheck --print-limit 5 cuda_kernels_test --gtest_brief=1 \
        >"$out/memcheck_kernels.log" 2>&1
      record "memcheck cuda_kernels_test" "rc=$?" "$(grep -Eo 'ERROR SUMMARY: [0-9]+ errors' "$out/memcheck_kernels.log")"
      compute-sanitizer --tool memcheck --print-limit 5 cuda_engine_gpu_test --gtest_brief=1 \
        >"$out/memcheck_engine.log" 2>&1
      record "memcheck cuda_engine_gpu_test" "rc=$?" "$(grep -Eo 'ERROR SUMMARY: [0-9]+ errors' "$out/memcheck_engine.log")"
      ;;
    calibrate)
      # Before committing it as configs/profiles/h100.json: every GEMM rate under 989 TFLOP/s,
      # pinned copies ~20-55 GB/s each way, a context headroom of a few hundred MiB.
      nvme=$(mktemp -d)
      timeout 600 strata calibrate --backend cuda --model tiny-gpu gpt2-124m gpt2-1.5b \
        --micro-batch 8 16 --nvme-dir "$nvme" --out "$out/h100.json" >"$out/calibrate.log" 2>&1
      record "calibrate --backend cuda" "$(status_of $?)" "$out/h100.json"
      rm -rf "$nvme"
      ;;
    gpt2)
      # Two plans per model (micro-batch; recompute), predicted beside measured; with the
      # calibrated profile when the calibrate phase wrote one.
      profile=(); [[ -s $out/h100.json ]] && profile=(--profile "$out/h100.json")
      for spec in gpt2-124m:16:none gpt2-124m:8:full gpt2-350m:8:none gpt2-350m:16:full \
                  gpt2-774m:8:none gpt2-774m:16:full gpt2-1.5b:8:none gpt2-1.5b:16:full; do
        IFS=: read -r model b recompute <<<"$spec"
        dir=$out/run-$model-b$b-$recompute
        mkdir -p "$dir"
        printf '{"tp":1,"pp":1,"dp":1,"virtual_stages":1,"micro_batch":%d,"schedule":"1f1b","zero_stage":0,"offload":{"optimizer":"none","gradients":"none","params":"none"},"recompute":"%s","sequence_parallel":false}\n' \
          "$b" "$recompute" >"$dir/plan.json"
        python3 - "$dir/train.json" "$((b * 4))" <<'PY'
import json, sys
t = json.load(open("configs/train/gpt2.json")); t["global_batch"] = int(sys.argv[2]); t["steps"] = 12
json.dump(t, open(sys.argv[1], "w"))
PY
        timeout 600 strata run --backend cuda --plan "$dir/plan.json" --model "$model" \
          --train "$dir/train.json" --cluster h100-x1 --out "$dir" "${profile[@]}" \
          >"$dir/run.log" 2>&1
        record "run $model b$b $recompute" "rc=$?" "$(grep -E 'measured,' "$dir/run.log" | head -1)"
      done
      ;;
    offload)
      # Issue 18: a GPT whose model states (16 B/param) are >= 1.5x the GPU's memory.
      strata plan --model gpt-8b --cluster h100-x1 --train gpt-8b --top 5 \
        --out "$out/plan-gpt-8b.json" >"$out/plan-gpt-8b.log" 2>&1
      record "plan gpt-8b" "rc=$?" "$(sed -n 5p "$out/plan-gpt-8b.log")"
      timeout 900 strata run --backend cuda --plan "$out/plan-gpt-8b.json" --model gpt-8b \
        --train gpt-8b --cluster h100-x1 --nvme-dir /tmp --out "$out/run-gpt-8b" \
        >"$out/run-gpt-8b.log" 2>&1
      record "run gpt-8b offload" "rc=$?" "$(grep -E 'median step|measured,' "$out/run-gpt-8b.log" | tr '\n' ' ')"
      ;;
    select)
      # Issue 14 on one GPU: gpt2-grid under the three policies (steps cut to SELECT_STEPS,
      # default 10, to fit the device time), then the 6B model that only trains spilled.
      python3 - "$out/gpt2-grid.json" "${SELECT_STEPS:-10}" <<'PY'
import json, sys
w = json.load(open("configs/workloads/gpt2-grid.json"))
for job in w["jobs"]:
    job["steps"] = int(sys.argv[2])
json.dump(w, open(sys.argv[1], "w"))
PY
      for policy in strata lrtf sequential; do
        timeout 900 strata select --workload "$out/gpt2-grid.json" --cluster h100-x1 --gpus 1 \
          --policy "$policy" --out "$out/select-$policy" >"$out/select-$policy.log" 2>&1
        record "select gpt2-grid $policy" "$(status_of $?)" \
          "$(grep -E 'makespan' "$out/select-$policy.log" | tail -1)"
      done
      timeout 900 strata select --workload gpt-6b-spill --cluster h100-x1 --gpus 1 \
        --out "$out/select-gpt-6b" >"$out/select-gpt-6b.log" 2>&1
      record "select gpt-6b-spill" "$(status_of $?)" "$(grep -E 'makespan' "$out/select-gpt-6b.log" | tail -1)"
      ;;
    pytorch)
      timeout 1200 python3 tools/bench/gpt2_vs_pytorch.py --strata .gpu/bin/strata \
        >"$out/gpt2_vs_pytorch.log" 2>&1
      record "gpt2_vs_pytorch" "rc=$?"
      ;;
    *) echo "gpu_session: unknown phase '$phase'" >&2; exit 2 ;;
  esac
done
