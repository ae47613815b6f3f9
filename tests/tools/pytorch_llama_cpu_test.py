#!/usr/bin/env python3
"""tools/bench/pytorch_llama.py on the CPU (issue 26): the tiny Llama for 2 steps of 2
sequences, eager. Its JSON line and its human line parse and agree; its step-0 loss is near
ln(vocab); its tokens/s and TFLOP/s follow from its step time by strata's formulas (worked by
hand below); a GPT-2 config is refused with exit 2 naming the file and the field. The script's
own exit 77 (torch not importable) is passed on as a skip; under CI=true the script exits 1
there and this test fails.
Usage: pytorch_llama_cpu_test.py PYTHON SCRIPT MODELS_DIR
"""
import json
import math
import re
import subprocess
import sys

SKIP = 77

# tiny-llama (configs/models/tiny-llama.json): h = 64, 4 heads of 16, 2 KV heads, f = 176,
# V = 256, l = 4, s = 64; global batch B = 2 (2 sequences x 1 micro-step).
# GEMM weights a layer: 2h^2 + 2 (2 x 16) h + 3 f h = 8192 + 4096 + 33792 = 46080, k = 11.25.
# Megatron's F = 8k B s l h^2 (1 + 2s/(kh) + 3V/(4klh))
#   = 188,743,680 x (1 + 128/720 + 768/11520) = 188,743,680 x 56/45 = 234,881,024.
EXPECTED_FLOPS = 234_881_024
TOKENS_PER_STEP = 2 * 64
# The first loss, from normal(0, 0.02) weights: the final RMSNorm leaves each token a vector of
# RMS ~1 (gain 1), so each logit is a sum of 64 products with N(0, 0.02^2) weights: sigma^2 =
# 64 x 0.02^2 = 0.0256, and E[loss] = E[logsumexp] - E[target logit] ~ ln V + sigma^2 / 2 =
# ln 256 + 0.013. Over 128 tokens the mean's noise is ~0.16 / sqrt(128) = 0.014. 0.1 is six
# of those away, and a logit scale sigma > 0.45 (a wrong init or a missing final norm on a
# larger stream), a sum in place of the mean, or a NaN fails it.
FIRST_LOSS_BOUND = 0.1
LINE = re.compile(r"^pytorch tiny-llama: 2 x 1 sequences of 64, median step (?P<step>[0-9.]+) s, "
                  r"(?P<tokens>[0-9]+) tokens/s, (?P<tflops>[0-9.]+) TFLOP/s, MFU n/a, peak n/a, "
                  r"first loss (?P<first>[0-9.]+), final loss (?P<final>[0-9.]+)$", re.M)

failures = 0


def check(what, ok):
    global failures
    print(f"{'ok' if ok else 'FAIL'}: {what}")
    failures += 0 if ok else 1


def main():
    python, script, models = sys.argv[1:4]
    run = subprocess.run([python, script, "--model", f"{models}/tiny-llama.json", "--device", "cpu",
                          "--no-compile", "--micro-batch", "2", "--steps", "2", "--warmup", "0",
                          "--json"], capture_output=True, text=True)
    if run.returncode == SKIP:
        print(run.stdout + run.stderr)
        return SKIP
    check(f"exit code 0 (got {run.returncode})", run.returncode == 0)
    if run.returncode != 0:
        print(run.stdout[-3000:] + run.stderr[-3000:])
        return 1
    result = json.loads(run.stdout.strip().splitlines()[-1])
    line = LINE.search(run.stderr)
    check(f"the human line parses (stderr: {run.stderr.strip().splitlines()[-1]!r})", line is not None)
    check("model, device, steps and compile as asked",
          (result["model"], result["device"], result["steps"], result["compiled"]) ==
          ("tiny-llama", "cpu", 2, False))
    first, step_s = result["first_loss"], result["step_s"]
    check(f"first loss {first:.4f} within {FIRST_LOSS_BOUND} of ln 256 = {math.log(256):.4f}",
          abs(first - math.log(256)) <= FIRST_LOSS_BOUND)
    check(f"final loss {result['final_loss']} is finite", math.isfinite(result["final_loss"]))
    check(f"tokens/s x step time = {TOKENS_PER_STEP} tokens",
          math.isclose(result["tokens_per_s"] * step_s, TOKENS_PER_STEP, rel_tol=1e-12))
    check(f"TFLOP/s x step time = {EXPECTED_FLOPS:,} FLOPs (strata's formula for tiny-llama)",
          math.isclose(result["tflops"] * 1e12 * step_s, EXPECTED_FLOPS, rel_tol=1e-12))
    check("no MFU or GPU memory for a CPU run", result["mfu"] is None and result["peak_mem_gib"] is None)
    if line:
        check("the human line says the JSON's figures",
              (line["step"], line["first"]) == (f"{step_s:.4f}", f"{first:.4f}"))
    # A GPT-2 config: refused before any training, exit 2, naming the file and the field.
    gpt = subprocess.run([python, script, "--model", f"{models}/tiny.json", "--device", "cpu",
                          "--no-compile", "--micro-batch", "1"], capture_output=True, text=True)
    check(f"a GPT-2 config exits 2 (got {gpt.returncode}) naming file and field: {gpt.stderr.strip()!r}",
          gpt.returncode == 2 and "tiny.json" in gpt.stderr and "norm 'layernorm'" in gpt.stderr)
    print("PASSED" if failures == 0 else f"FAILED: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
