#!/usr/bin/env bash
# One call's worth of GPU work on a lent machine, run from the repository root there with the
# bundle of tools/device/bundle.sh in .gpu: the GPU tests, the attention benchmark, and short
# strata CUDA runs of GPT-2 124M and 1.5B (one GPU, no offload). Logs go to $OUT (or ./gpu-out).
# Usage: tools/device/gpu_session.sh [tests] [attention] [gpt2] [sanitize]   (default: all but sanitize)
# Deliberately not here: building (done on the CPU machine), the PyTorch comparison
# (tools/bench/gpt2_vs_pytorch.py does that).
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
source tools/device/env.sh .gpu
phases=${*:-tests attention gpt2}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
for phase in $phases; do
  case $phase in
    tests)
      cuda_kernels_test --gtest_brief=1 2>&1 | tee "$out/kernels.log" | tail -8
      cuda_runtime_gpu_test --gtest_brief=1 2>&1 | tail -3
      cuda_engine_gpu_test 2>&1 | tee "$out/engine.log" | grep -E "worst|FAILED|PASSED|Failure|Expected|Which is|actual" | head -40
      ;;
    sanitize)
      compute-sanitizer --tool memcheck --print-limit 5 cuda_kernels_test --gtest_brief=1 2>&1 | tail -6
      compute-sanitizer --tool memcheck --print-limit 5 cuda_engine_gpu_test --gtest_brief=1 \
        --gtest_filter='*Matrix*/0:*Matrix*/4:*Matrix*/7' 2>&1 | tail -6
      ;;
    attention)
      strata_attention_bench 2>&1 | tee "$out/attention.log" | tail -12
      ;;
    gpt2)
      for spec in gpt2-124m:16:4 gpt2-1.5b:8:4; do
        IFS=: read -r model b k <<<"$spec"
        dir=$out/run-$model
        mkdir -p "$dir"
        printf '{"tp":1,"pp":1,"dp":1,"virtual_stages":1,"micro_batch":%d,"schedule":"1f1b","zero_stage":0,"offload":{"optimizer":"none","gradients":"none","params":"none"},"recompute":"none","sequence_parallel":false}\n' "$b" >"$dir/plan.json"
        python3 - "$dir/train.json" "$((b * k))" <<'PY'
import json, sys
t = json.load(open("configs/train/gpt2.json")); t["global_batch"] = int(sys.argv[2]); t["steps"] = 6
json.dump(t, open(sys.argv[1], "w"))
PY
        strata run --backend cuda --plan "$dir/plan.json" --model "$model" --train "$dir/train.json" \
          --cluster h100-x1 --steps ${GPT2_STEPS:-6} --out "$dir" 2>&1 | tail -4
      done
      ;;
  esac
done
