#!/usr/bin/env python3
"""docs/cost-model.md's validation table from the CLI: every published run predicted by
`strata predict --profile megatron-lm-2021` with the bundled model, training setup and plan
(the paper's t, p, d and global batch), beside the published TFLOP/s per GPU.

The profile prices each run with the kernels of the framework that made it (materialised
attention with dropout, whole-layer recomputation, the published activation memory,
ZeRO-3 gathering a layer again for its recomputed forward) and adds the device memory a
run loses outside its tensors. The figure compared is the hardware TFLOP/s per GPU, which
for these runs (all with full recomputation) is Megatron's F over the step.

--check asserts the bounds (exit 1 when one fails): every row within --bound (15%), except
the rows named in ROW_BOUNDS with their reason; the mean absolute error within --mape (10%).
Exit 2 on a tool error. Standard library only.
"""
import argparse
import json
import subprocess
import sys

# (label, model, train, plan, published TFLOP/s per GPU, source)
ROWS = [
    ("1.7B t1 p1 d32", "megatron-1.7b", "megatron-1.7b", "megatron-1.7b", 137,
     "Narayanan et al. 2021, Table 1"),
    ("7.5B t4 p1 d32", "megatron-7.5b", "megatron-7.5b", "megatron-7.5b", 142,
     "Narayanan et al. 2021, Table 1"),
    ("39.1B t8 p2 d32", "megatron-39.1b", "megatron-39.1b", "megatron-39.1b", 138,
     "Narayanan et al. 2021, Table 1"),
    ("145.6B t8 p8 d24", "megatron-145.6b", "megatron-145.6b", "megatron-145.6b", 148,
     "Narayanan et al. 2021, Table 1"),
    ("1T t8 p64 d6", "megatron-1t", "megatron-1t", "megatron-1t", 163,
     "Narayanan et al. 2021, Table 1"),
    ("GPT-3 175B ZeRO-3, 384 GPUs", "gpt3-175b", "gpt3-175b", "gpt3-175b-zero3-384", 144,
     "Narayanan et al. 2021, Table 2"),
    ("GPT-3 175B ZeRO-3, 1536 GPUs", "gpt3-175b", "gpt3-175b", "gpt3-175b-zero3-1536", 44,
     "Narayanan et al. 2021, Table 2"),
    ("GPT-3 175B PTD-P, 384 GPUs", "gpt3-175b", "gpt3-175b", "gpt3-175b-ptdp-384", 153,
     "Narayanan et al. 2021, Table 2"),
    ("GPT-3 175B PTD-P, 1536 GPUs", "gpt3-175b", "gpt3-175b", "gpt3-175b-ptdp-1536", 141,
     "Narayanan et al. 2021, Table 2"),
]

# Rows held to a wider bound, with the mechanism that is missing: none now. (The GPT-3 175B
# ZeRO-3 row at 384 GPUs was held to 20% while each layer's backward waited for three
# transfers, its on-demand regather queued behind the next layer's prefetch.)
ROW_BOUNDS = {}


def predict(strata, model, train, plan, profile):
    cmd = [strata, "predict", "--model", model, "--cluster", "selene-a100", "--train", train,
           "--plan", plan, "--profile", profile, "--json"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.stderr.write(f"published_table: {' '.join(cmd)} failed ({proc.returncode}):\n"
                         f"{proc.stdout}{proc.stderr}")
        raise SystemExit(2)
    return json.loads(proc.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", required=True, help="the strata binary")
    ap.add_argument("--profile", default="megatron-lm-2021", help="profile (default megatron-lm-2021)")
    ap.add_argument("--bound", type=float, default=0.15, help="per-row bound (0.15)")
    ap.add_argument("--mape", type=float, default=0.10, help="bound on the mean |error| (0.10)")
    ap.add_argument("--check", action="store_true", help="exit 1 when a bound fails")
    args = ap.parse_args()

    print(f"{'run':<30} {'predicted':>9} {'published':>9} {'error':>7} {'device GiB':>10}")
    errors, failed = [], []
    for label, model, train, plan, published, _source in ROWS:
        p = predict(args.strata, model, train, plan, args.profile)
        err = (p["tflops_per_gpu"] - published) / published
        errors.append(abs(err))
        bound, why = ROW_BOUNDS.get(label, (args.bound, ""))
        ok = abs(err) <= bound
        if not ok:
            failed.append(label)
        print(f"{label:<30} {p['tflops_per_gpu']:>9.1f} {published:>9} {100 * err:>+6.1f}% "
              f"{p['memory_bytes']['device'] / 2**30:>10.1f}{'' if ok else '  OUT OF BOUND'}")
    mape = sum(errors) / len(errors)
    print(f"mean absolute error {100 * mape:.1f}% (bound {100 * args.mape:.0f}%); "
          f"rows within {100 * args.bound:.0f}%: {sum(e <= args.bound for e in errors)} of {len(errors)}")
    for label, (bound, why) in ROW_BOUNDS.items():
        print(f"  {label}: bound {100 * bound:.0f}%: {why}")
    if mape > args.mape:
        failed.append("mean absolute error")
    if failed:
        print("out of bound: " + ", ".join(failed))
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())
