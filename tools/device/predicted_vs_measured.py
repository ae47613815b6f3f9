#!/usr/bin/env python3
"""The gpt2 phase's verdict: step time and peak device memory, predicted beside measured.

Each argument is MODEL=COMPARE_JSON:RUN_LOG, the output of `strata compare --json` and the
stamped log of the `strata run` it measured (tools/device/gpu_session.sh writes each line as
"[  12.3s] ..."). Prints one line, e.g.
  gpt2-124m step -3.1% mem +35.0% first step 9.2 s; gpt2-1.5b step ... (bounds 10% / 5%)
and exits 0 when every model's step time and memory are within the bounds, 1 otherwise
(a missing or unreadable file, from a run stopped by its cap, included).
Deliberately not here: running anything.
"""
import argparse
import json
import re
import sys

STAMPED_FIRST_STEP = re.compile(r"^\[\s*([0-9.]+)s\] step\s+1/")


def relative_error(compare, key):
    for field in compare["fields"]:
        if field["key"] == key:
            return field["relative_error"]
    return None


def first_step_s(log_path):
    try:
        with open(log_path) as log:
            for line in log:
                m = STAMPED_FIRST_STEP.match(line)
                if m:
                    return float(m.group(1))
    except OSError:
        pass
    return None


def run_specs(specs, prog):
    """[(model, compare_json, run_log)] of MODEL=COMPARE_JSON:RUN_LOG arguments, or None after
    naming the first malformed one on stderr (the verdicts' exit 2)."""
    runs = []
    for spec in specs:
        name, _, paths = spec.partition("=")
        compare_path, _, log_path = paths.partition(":")
        if not name or not compare_path or not log_path:
            print(f"{prog}: '{spec}' is not MODEL=COMPARE_JSON:RUN_LOG", file=sys.stderr)
            return None
        runs.append((name, compare_path, log_path))
    return runs


def verdict(name, compare_path, log_path, max_step, max_memory):
    """(text, within bounds) for one model."""
    first = first_step_s(log_path)
    first_text = f"first step {first:.1f} s" if first is not None else "no step"
    try:
        with open(compare_path) as f:
            compare = json.load(f)
        step = relative_error(compare, "step_time_s")
        memory = relative_error(compare, "memory_bytes.device")
    except (OSError, ValueError, KeyError) as e:
        return f"{name} no comparison ({type(e).__name__}), {first_text}", False
    if step is None or memory is None:
        return f"{name} comparison without step time or device memory, {first_text}", False
    ok = abs(step) <= max_step and abs(memory) <= max_memory
    return f"{name} step {100 * step:+.1f}% mem {100 * memory:+.1f}% {first_text}", ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-step-error", type=float, required=True)
    ap.add_argument("--max-memory-error", type=float, required=True)
    ap.add_argument("runs", nargs="+", metavar="MODEL=COMPARE_JSON:RUN_LOG")
    a = ap.parse_args()
    runs = run_specs(a.runs, "predicted_vs_measured")
    if runs is None:
        return 2
    texts, all_ok = [], True
    for name, compare_path, log_path in runs:
        text, ok = verdict(name, compare_path, log_path, a.max_step_error, a.max_memory_error)
        texts.append(text)
        all_ok = all_ok and ok
    print("; ".join(texts) + f" (bounds {100 * a.max_step_error:.0f}% / {100 * a.max_memory_error:.0f}%)")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
