#!/usr/bin/env python3
"""tools/device/offload_verdict.py, the offload phase's verdict, on made-up comparisons and run
logs: runs within the bounds pass and their line carries first step, tokens/s, MFU, step, the
optimizer's exposed part and memory per tier; a first step past its bound, a step time or device memory just over theirs,
a missing comparison and a run without a step fail, naming what; a malformed argument is exit 2.
Usage: offload_verdict_test.py PYTHON SCRIPT
"""
import json
import os
import subprocess
import sys
import tempfile

failures = 0
GIB = float(1 << 30)


def check(what, ok, detail=""):
    global failures
    print(f"{'ok' if ok else 'FAIL'}: {what}{'' if ok else f' ({detail})'}")
    failures += 0 if ok else 1


def field(key, predicted, measured):
    error = (measured - predicted) / predicted if predicted else None
    return {"key": key, "unit": "", "predicted": predicted, "measured": measured, "relative_error": error}


def write_case(work, name, first_step_s, step=(6.0, 6.2), device=(60.0, 61.0)):
    """A compare JSON and a stamped run log; step and device: (predicted, measured)."""
    compare = {"predicted_plan": "p", "measured_plan": "p", "fields": [
        field("step_time_s", *step),
        field("tokens_per_s", 5400.0, 5300.0),
        field("mfu", 0.42, 0.413),
        field("parts.optimizer_s", 0.31, 0.35),
        field("memory_bytes.device", device[0] * GIB, device[1] * GIB),
        field("memory_bytes.host", 123.2 * GIB, 123.3 * GIB),
        field("memory_bytes.nvme", 0.0, 0.0),
    ]}
    path = f"{work}/{name}.json"
    with open(path, "w") as f:
        json.dump(compare, f)
    log = f"{work}/{name}.log"
    with open(log, "w") as f:
        f.write("[    1.0s] strata run: setting up model gpt-8b (8269M parameters)\n")
        if first_step_s is not None:
            f.write(f"[{first_step_s:7.1f}s] step     1/3  loss 11.0000   5300 tokens/s  ETA 12.0 s\n")
    return f"{name}={path}:{log}"


def main():
    python, script = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as work:
        def verdict(*runs):
            r = subprocess.run([python, script, "--max-step-error", "0.10", "--max-memory-error", "0.05",
                                "--max-first-step-s", "30", *runs], capture_output=True, text=True)
            return r.returncode, r.stdout.strip() + r.stderr.strip()

        # Within: first step 24.1 s (bound 30), step +3.3% (6.2 against 6.0), device +1.7%.
        ok = write_case(work, "gpt-8b", 24.1)
        rc, out = verdict(ok, write_case(work, "llama3-8b", 29.9, step=(10.0, 10.9)))
        check("runs within the bounds pass", rc == 0, out)
        for text in ("gpt-8b: first step 24.1 s", "5300 tokens/s", "MFU 41.3%",
                     "step 6.20 s predicted 6.00 (+3.3%)", "optimizer 0.35 s predicted 0.31 (+12.9%)",
                     "device 61.0/60.0 GiB (+1.7%)",
                     "host 123.3/123.2 GiB (+0.1%)", "nvme 0.0/0.0 GiB", "llama3-8b: first step 29.9 s",
                     "(bounds: first step 30 s, step 10%, device memory 5%)"):
            check(f"the line says '{text}'", text in out, out)
        # Just over: first step 30.5 s; step +10.5%; device memory +5.5%.
        for case, what in ((write_case(work, "late", 30.5), "first step 30.5"),
                           (write_case(work, "slow", 20.0, step=(6.0, 6.63)), "(+10.5%)"),
                           (write_case(work, "big", 20.0, device=(60.0, 63.3)), "(+5.5%)")):
            rc, out = verdict(ok, case)
            check(f"a run over a bound fails ({what})", rc == 1 and what in out, out)
        missing = write_case(work, "gone", 20.0)
        os.remove(f"{work}/gone.json")
        rc, out = verdict(missing)
        check("a missing comparison fails and says so", rc == 1 and "no comparison" in out, out)
        rc, out = verdict(write_case(work, "stopped", None))
        check("a run without a step fails and says so", rc == 1 and "stopped: no step" in out, out)
        rc, out = verdict("gpt-8b")
        check("a malformed argument is exit 2", rc == 2 and "MODEL=COMPARE_JSON:RUN_LOG" in out, out)
    print("PASSED" if failures == 0 else f"{failures} FAILED")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
