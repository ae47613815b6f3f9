#!/usr/bin/env python3
"""tools/device/backend_parity.py, the llama phase's verdict, on made-up run directories: runs
within the bounds pass; a loss or a gradient norm just over its step's bound, a loss that does
not fall, a NaN and a short or missing run fail, naming what; the tokens/s figure and ratio
come from report.json and PyTorch's JSON line.
Usage: backend_parity_test.py PYTHON SCRIPT
"""
import json
import os
import subprocess
import sys
import tempfile

failures = 0


def check(what, ok, detail=""):
    global failures
    print(f"{'ok' if ok else 'FAIL'}: {what}{'' if ok else f' ({detail})'}")
    failures += 0 if ok else 1


def write_run(directory, steps, tokens_per_s=None):
    """steps: [(loss, grad_norm)], written as strata's metrics.jsonl (and report.json)."""
    os.makedirs(directory, exist_ok=True)
    with open(f"{directory}/metrics.jsonl", "w") as f:
        for i, (loss, norm) in enumerate(steps):
            f.write(json.dumps({"step": i + 1, "loss": loss, "grad_norm": norm, "lr": 6e-4}) + "\n")
    if tokens_per_s is not None:
        json.dump({"tokens_per_s": tokens_per_s}, open(f"{directory}/report.json", "w"))


def main():
    python, script = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as work:
        return cases(python, script, work)


def cases(python, script, work):

    def verdict(cuda, cpu, pytorch=None, steps=3):
        cmd = [python, script, "--cuda", cuda, "--cpu", cpu, "--steps", str(steps)]
        if pytorch:
            cmd += ["--pytorch", pytorch]
        r = subprocess.run(cmd, capture_output=True, text=True)
        return r.returncode, r.stdout.strip() + r.stderr.strip()

    cpu = f"{work}/cpu"
    # The CPU reference: 3 steps, loss falling 12.17 -> 11.20.
    write_run(cpu, [(12.17, 4.0), (11.60, 3.0), (11.20, 2.5)])
    # Within: step 0's loss 4e-3 off (bound 5e-3), step 1's norm 4e-2 off (bound 5e-2); a
    # longer CUDA run (10 steps) is compared over the first 3 only.
    ok_steps = [(12.17 * 1.004, 4.0 * 1.01), (11.60, 3.0 * 1.04), (11.20 * 0.995, 2.5)]
    write_run(f"{work}/ok", ok_steps + [(99.0, 99.0)] * 7, tokens_per_s=41000.0)
    pytorch = f"{work}/pytorch.json"
    with open(pytorch, "w") as f:
        f.write("not json: progress a line before\n")
        f.write(json.dumps({"tokens_per_s": 32800.0, "compiled": True,
                            "attention": "scaled_dot_product_attention, enable_gqa"}) + "\n")
    rc, out = verdict(f"{work}/ok", cpu, pytorch)
    check("runs within the bounds pass", rc == 0, out)
    # The worst by its ratio to the bound: loss 4e-3 of 5e-3 (0.8) at step 1, not step 3's
    # 5e-3 of 1e-2 (0.5); norm 4e-2 of 5e-2 (0.8) at step 2, not step 1's 1e-2 of 2e-2.
    check("the line names the worst loss and norm and their steps",
          "worst loss 4.0e-03 at step 1 of 5e-03, grad norm 4.0e-02 at step 2 of 5e-02" in out, out)
    # 41000 / 32800 = 1.25.
    check("tokens/s beside PyTorch's, with the ratio",
          "strata 41000 tokens/s, pytorch 32800 tokens/s (compiled, scaled_dot_product_attention, "
          "enable_gqa): strata/pytorch 1.25x" in out, out)

    # Step 0's loss 6e-3 off: over its 5e-3 (though under later steps' 1e-2).
    write_run(f"{work}/loss0", [(12.17 * 1.006, 4.0)] + ok_steps[1:], tokens_per_s=1.0)
    rc, out = verdict(f"{work}/loss0", cpu)
    check("step 0's loss over 5e-3 fails", rc == 1 and "NOT within" in out and "at step 1 of 5e-03" in out, out)
    # Step 2's gradient norm 6e-2 off: over 5e-2.
    write_run(f"{work}/norm2", ok_steps[:2] + [(11.20, 2.5 * 1.06)], tokens_per_s=1.0)
    rc, out = verdict(f"{work}/norm2", cpu)
    check("a later norm over 5e-2 fails", rc == 1 and "grad norm 6.0e-02 at step 3" in out, out)
    # A NaN loss.
    write_run(f"{work}/nan", ok_steps[:2] + [(float("nan"), 2.5)], tokens_per_s=1.0)
    rc, out = verdict(f"{work}/nan", cpu)
    check("a NaN fails", rc == 1 and "NOT within" in out, out)
    # Both runs flat: equal, but nothing was trained.
    write_run(f"{work}/flat-cpu", [(12.17, 4.0)] * 3)
    write_run(f"{work}/flat", [(12.17, 4.0)] * 3, tokens_per_s=1.0)
    rc, out = verdict(f"{work}/flat", f"{work}/flat-cpu")
    check("a loss that does not fall fails", rc == 1 and "did not fall" in out, out)
    # A CPU run stopped after 2 steps; a CUDA run that wrote nothing.
    write_run(f"{work}/short", ok_steps[:2])
    rc, out = verdict(f"{work}/ok", f"{work}/short")
    check("a short run fails, counting its steps", rc == 1 and "CPU run 2 of 3 steps" in out, out)
    rc, out = verdict(f"{work}/none", cpu, f"{work}/no-pytorch.json")
    check("a missing run fails, naming its file", rc == 1 and "no CUDA steps" in out and
          "strata: no report.json" in out, out)
    # PyTorch out of memory (pytorch_llama.py's exit 3 JSON): said, not a ratio.
    with open(pytorch, "w") as f:
        f.write(json.dumps({"framework": "pytorch", "error": "out of memory"}) + "\n")
    rc, out = verdict(f"{work}/ok", cpu, pytorch)
    check("PyTorch's error is said; parity still passes", rc == 0 and "pytorch: out of memory" in out, out)
    rc, out = verdict(f"{work}/ok", cpu, steps=1)
    check("--steps 1 is refused, exit 2", rc == 2 and "--steps: value 1" in out, out)
    print("PASSED" if failures == 0 else f"FAILED: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
