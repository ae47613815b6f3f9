#!/usr/bin/env python3
"""Many models at once on this machine: `strata select` runs a workload under its three
policies (strata, lrtf, sequential) and prints each one's predicted and measured makespan.

The loop as `strata` closes it everywhere: calibrate once (`strata calibrate`, one kernel
thread per device worker, the workload's model shapes), fold a few `strata run` feedback
runs into the profile (`--update-profile`: compute and communication scales, the cores'
slowdown when both are busy), then price and run. Every select run reads the same frozen
profile; no select run touches it.

Measurements on a shared 2-core machine are noisy: the policies are run --rounds times,
alternating (strata, lrtf, sequential, then lrtf, sequential, strata, ...), and each
policy's measured makespan is the median of its rounds.

What it prints: per policy, the predicted makespan and its lower bound, the measured
median, the error, and the measured ratio to the sequential and the LRTF policies; then
the issue's targets, each marked holds / does not hold:
  accuracy   |predicted - measured| / measured <= --bound (default 15%), per policy
  hydra      strata <= 0.67 x sequential (Hydra's 1.5x over one model after another)
  lrtf       strata <= lrtf
Exit code 0 whatever the targets say (this is a benchmark; --check makes a miss exit 1),
2 on a usage or tool error.

Deliberately only the standard library and no knowledge of the cost model: the numbers
come from select_report.json.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

POLICIES = ["strata", "lrtf", "sequential"]

# The feedback runs: the tiny model alone (compute) and on two ranks (communication and
# the cores' slowdown when both are busy), as tools/loop_accuracy.py folds them.
BASE_PLAN = {
    "tp": 1, "pp": 1, "dp": 1, "virtual_stages": 1, "micro_batch": 1, "schedule": "1f1b",
    "zero_stage": 0,
    "offload": {"optimizer": "none", "gradients": "none", "params": "none"},
    "recompute": "none", "sequence_parallel": False,
}
FEEDBACK = [("single", {}), ("dp2", {"dp": 2})]


def run(cmd, log, check=True):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + proc.stdout + proc.stderr + "\n")
    if check and proc.returncode != 0:
        sys.stderr.write(f"select_bench: command failed ({proc.returncode}): {' '.join(cmd)}\n"
                         f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        raise SystemExit(2)
    return proc.stdout


def rotated(items, k):
    k %= len(items)
    return items[k:] + items[:k]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", required=True, help="the strata binary")
    ap.add_argument("--workload", default="tiny-grid", help="workload (default tiny-grid)")
    ap.add_argument("--gpus", type=int, default=2, help="devices (default 2)")
    ap.add_argument("--device-budget-mib", type=float, default=8.0,
                    help="per device; 8 MiB makes tiny-grid's jobs offload or spill (default 8)")
    ap.add_argument("--work", default="select-bench", help="scratch directory")
    ap.add_argument("--profile", help="use this profile (copied) instead of calibrating")
    ap.add_argument("--feedback-rounds", type=int, default=2,
                    help="rounds of feedback runs folded into the profile (default 2)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each policy (default 3)")
    ap.add_argument("--bound", type=float, default=0.15, help="makespan error bound (0.15)")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target does not hold")
    args = ap.parse_args()
    if args.rounds < 1 or args.gpus < 1:
        sys.stderr.write("select_bench: --rounds and --gpus must be >= 1\n")
        return 2

    # One kernel thread per device worker, as `strata select` gives each; the calibration
    # times the kernels at the same count and the feedback runs use it too.
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    os.makedirs(args.work, exist_ok=True)
    log = os.path.join(args.work, "commands.log")
    open(log, "w").close()
    profile = os.path.join(args.work, "profile.json")
    if args.profile:
        shutil.copyfile(args.profile, profile)
    else:
        print("calibrating (strata calibrate, tiny and tiny-wide shapes) ...", flush=True)
        run([args.strata, "calibrate", "--threads", "1", "--ranks", "2", "--model", "tiny",
             "tiny-wide", "--micro-batch", "1", "2", "4", "8", "--tp", "1", "2",
             "--out", profile], log)
    for r in range(args.feedback_rounds):
        for name, fields in FEEDBACK:
            plan = dict(BASE_PLAN, **fields)
            path = os.path.join(args.work, f"feedback-{name}.json")
            with open(path, "w") as f:
                json.dump(plan, f)
            run([args.strata, "run", "--plan", path, "--model", "tiny", "--train", "tiny",
                 "--steps", "15", "--update-profile", profile,
                 "--out", os.path.join(args.work, "feedback")], log)
    with open(profile) as f:
        p = json.load(f)
    print("profile: compute_time_scale {:.3f}, comm_time_scale {:.3f}".format(
        p.get("compute_time_scale", 0), p.get("comm_time_scale", 0)))

    measured = {name: [] for name in POLICIES}
    reports = {}
    for r in range(args.rounds):
        for policy in rotated(POLICIES, r):
            out = os.path.join(args.work, f"{policy}-{r}")
            run([args.strata, "select", "--workload", args.workload, "--gpus", str(args.gpus),
                 "--device-budget-mib", str(args.device_budget_mib), "--policy", policy,
                 "--profile", profile, "--out", out], log)
            with open(os.path.join(out, "select_report.json")) as f:
                report = json.load(f)
            reports[policy] = report
            measured[policy].append(report["measured_makespan_s"])
            print(f"  round {r + 1} {policy:<10} measured {report['measured_makespan_s']:.2f} s",
                  flush=True)

    med = {name: statistics.median(v) for name, v in measured.items()}
    print(f"\nworkload {args.workload} on {args.gpus} devices, {args.device_budget_mib:g} MiB "
          f"each, median of {args.rounds} runs:")
    print(f"{'policy':<11} {'predicted_s':>11} {'bound_s':>8} {'measured_s':>10} {'error':>7} "
          f"{'/ sequential':>12} {'/ lrtf':>7}")
    for name in POLICIES:
        rep = reports[name]
        pred = rep["predicted_makespan_s"]
        err = (pred - med[name]) / med[name]
        print(f"{name:<11} {pred:>11.2f} {rep['lower_bound_s']:>8.2f} {med[name]:>10.2f} "
              f"{100 * err:>+6.1f}% {med[name] / med['sequential']:>12.2f} "
              f"{med[name] / med['lrtf']:>7.2f}")
    checks = []
    for name in POLICIES:
        pred = reports[name]["predicted_makespan_s"]
        checks.append((f"accuracy {name}: |error| <= {100 * args.bound:.0f}%",
                       abs(pred - med[name]) / med[name] <= args.bound))
    checks.append(("hydra: strata <= 0.67 x sequential",
                   med["strata"] <= 0.67 * med["sequential"]))
    checks.append(("lrtf: strata <= lrtf", med["strata"] <= med["lrtf"]))
    for text, ok in checks:
        print(f"  {'holds' if ok else 'DOES NOT HOLD'}: {text}")
    return 1 if args.check and not all(ok for _, ok in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
