#!/usr/bin/env python3
"""The offload phase's verdict: models trained with the planner's best single-GPU plan (their
state offloaded), predicted beside measured.

Each argument is MODEL=COMPARE_JSON:RUN_LOG, the output of `strata compare --json` and the
stamped log of the `strata run` it measured (gpu_session.sh writes each line as
"[  12.3s] ..."). Prints one line, e.g.
  gpt-8b: first step 24.1 s, 5210 tokens/s, MFU 41.3%, step 6.29 s predicted 6.02 (+4.5%),
  optimizer 0.35 s predicted 0.31 (+12.9%), memory measured/predicted device 61.2/60.1 GiB
  (+1.8%) host 123.3/123.2 GiB (+0.1%) nvme 0.0/0.0 GiB; llama3-8b: ... (bounds: first step
  30 s, step 10%, device memory 5%)
The optimizer part is what of the CPU AdamW the step waited for (the rest runs beside the next
step's forward: docs/performance.md, "The clipped CPU optimizer beside the next forward");
reported, not judged.
and exits 0 when every model's first step came within the bound (seconds since the command),
its step time and device memory are within their bounds of the prediction, 1 otherwise (a
missing or unreadable file, from a run stopped by its cap, included). Host and NVMe memory
are reported, not judged: their prediction is the plan's state, the measurement adds staging.
Deliberately not here: running anything.
"""
import argparse
import json
import sys

from predicted_vs_measured import first_step_s, run_specs

GIB = float(1 << 30)


def fields_of(compare):
    return {f["key"]: f for f in compare["fields"]}


def percent(error):
    return "n/a" if error is None else f"{100 * error:+.1f}%"


def verdict(name, compare_path, log_path, bounds):
    """(text, within bounds) for one model."""
    first = first_step_s(log_path)
    if first is None:
        return f"{name}: no step", False
    try:
        with open(compare_path) as f:
            fields = fields_of(json.load(f))
        step, tokens, mfu = fields["step_time_s"], fields["tokens_per_s"], fields["mfu"]
        optimizer = fields.get("parts.optimizer_s")
        memory = {tier: fields[f"memory_bytes.{tier}"] for tier in ("device", "host", "nvme")}
    except (OSError, ValueError, KeyError) as e:
        return f"{name}: first step {first:.1f} s, no comparison ({type(e).__name__})", False
    tiers = " ".join(
        f"{tier} {m['measured'] / GIB:.1f}/{m['predicted'] / GIB:.1f} GiB"
        + (f" ({percent(m['relative_error'])})" if m["predicted"] else "")
        for tier, m in memory.items())
    text = (f"{name}: first step {first:.1f} s, {tokens['measured']:.0f} tokens/s, "
            f"MFU {100 * mfu['measured']:.1f}%, step {step['measured']:.2f} s predicted "
            f"{step['predicted']:.2f} ({percent(step['relative_error'])}), "
            + (f"optimizer {optimizer['measured']:.2f} s predicted {optimizer['predicted']:.2f} "
               f"({percent(optimizer['relative_error'])}), " if optimizer else "")
            + f"memory measured/predicted {tiers}")
    device_error = memory["device"]["relative_error"]
    ok = (first <= bounds.max_first_step_s
          and step["relative_error"] is not None and abs(step["relative_error"]) <= bounds.max_step_error
          and device_error is not None and abs(device_error) <= bounds.max_memory_error)
    return text, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-step-error", type=float, required=True)
    ap.add_argument("--max-memory-error", type=float, required=True)
    ap.add_argument("--max-first-step-s", type=float, required=True)
    ap.add_argument("runs", nargs="+", metavar="MODEL=COMPARE_JSON:RUN_LOG")
    a = ap.parse_args()
    runs = run_specs(a.runs, "offload_verdict")
    if runs is None:
        return 2
    texts, all_ok = [], True
    for name, compare_path, log_path in runs:
        text, ok = verdict(name, compare_path, log_path, a)
        texts.append(text)
        all_ok = all_ok and ok
    print("; ".join(texts) + f" (bounds: first step {a.max_first_step_s:.0f} s, step "
          f"{100 * a.max_step_error:.0f}%, device memory {100 * a.max_memory_error:.0f}%)")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
