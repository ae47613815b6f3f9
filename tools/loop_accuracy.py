#!/usr/bin/env python3
"""Close the loop on this machine: calibrate once, then for a matrix of tiny-model plans
predict (with the profile), train for real (`strata run`), compare, and check the bounds.

The loop's feedback: `strata run --update-profile` runs of the --feedback-plans fold what
the microbenchmarks miss into the profile (cost_model/pricing/profile_feedback.h): one rank fits its
compute_time_scale (single and single-mb4: the factor with the most noise to average);
dp2 and tp2 its comm_time_scale (from their measured communication) and
its busy_cores_slowdown (from their step); tp2-dp2 (four ranks on the two cores) its
time_sliced_sync_s (a blocking collective's wait for a swapped-out peer); each the interquartile mean
of what the last 32 runs of its kind asked for. The predictions come from
the profile after every feedback run, and no evaluation run touches the profile. The
evaluated plans are held out: a plan that fed the profile is never graded (it would be graded
on its own measurements), so --plans and --feedback-plans must not share a plan, and without
--plans every plan of the matrix but the feedback plans is evaluated. Because this
kind of machine drifts (a shared VM: for seconds to minutes at a time a process runs ~25%
slower or faster), the feedback runs are spread over the same minutes as the evaluation: each
round runs every plan of the matrix with the feedback plans' runs spread evenly among them.

What it checks, per plan and over the matrix:
  step time   |predicted - measured| / measured <= --step-bound (default 15%), measured =
              the trimmed mean over the rounds of each run's median step (see below)
  memory      |predicted - measured peak device bytes| / measured <= --mem-bound (5%)
  ranking     the plan predicted fastest is measured fastest, or within --rank-bound (5%)
              of the measured fastest
Exit code 0 when every check holds, 1 otherwise, 2 on a usage or tool error.

Measurements on a shared 2-core machine are noisy: each plan is run --rounds times,
interleaved (plan 1..N, then 1..N again), and the measured figure is the mean of the middle
runs' median steps (the fastest and the slowest quarter dropped, as for the fed-back factors). The
median within a run keeps a step hit by a hiccup out; across runs, a median of a few would
pick one of the machine's slow or fast spells (they last longer than a run), and a plain mean
would follow a single stray run: the trimmed mean weighs the spells as they came. The load
average is printed before and after.

Deliberately only the standard library (runs wherever the strata binary does) and no
knowledge of the cost model: the numbers come from `strata predict --json`, the run's
report.json and `strata compare --json`.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

# The matrix: (name, plan fields). Every plan trains the tiny model (8 layers, hidden 64,
# 4 heads, sequence 64, global batch 8) with the CPU backend, one MPI rank per "GPU".
BASE_PLAN = {
    "tp": 1, "pp": 1, "dp": 1, "virtual_stages": 1, "micro_batch": 1, "schedule": "1f1b",
    "zero_stage": 0,
    "offload": {"optimizer": "none", "gradients": "none", "params": "none"},
    "recompute": "none", "sequence_parallel": False,
}
PLANS = [
    ("single", {}),
    ("single-mb4", {"micro_batch": 4}),
    ("dp2-z0", {"dp": 2}),
    ("dp2-z1", {"dp": 2, "zero_stage": 1}),
    ("dp2-z2", {"dp": 2, "zero_stage": 2}),
    ("dp2-z3", {"dp": 2, "zero_stage": 3}),
    ("tp2", {"tp": 2}),
    ("pp2", {"pp": 2}),
    ("pp2-v2", {"pp": 2, "virtual_stages": 2, "schedule": "interleaved"}),
    ("tp2-dp2", {"tp": 2, "dp": 2}),
    ("dp4-z1", {"dp": 4, "zero_stage": 1}),
    ("3d-v2", {"tp": 2, "pp": 2, "dp": 2, "virtual_stages": 2, "schedule": "interleaved"}),
    ("tp2-sp", {"tp": 2, "sequence_parallel": True}),
    ("pp2-rc", {"pp": 2, "recompute": "full"}),
    ("dp2-off", {"dp": 2, "zero_stage": 2,
                 "offload": {"optimizer": "cpu", "gradients": "none", "params": "none"}}),
    # One rank on both cores: its CPU optimizer runs beside the backward (program.h).
    ("single-off", {"offload": {"optimizer": "cpu", "gradients": "none", "params": "none"}}),
]


def run(cmd, log=None, check=True):
    """Runs cmd, returns stdout; on failure prints its output and raises."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if log is not None:
        with open(log, "a") as f:
            f.write("$ " + " ".join(cmd) + "\n" + proc.stdout + proc.stderr + "\n")
    if check and proc.returncode != 0:
        sys.stderr.write(f"loop_accuracy: command failed ({proc.returncode}): {' '.join(cmd)}\n"
                         f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        raise SystemExit(2)
    return proc.stdout


def runnable_others(samples=10, interval_s=0.1):
    """Mean count of runnable tasks besides this script over ~1 s (/proc/loadavg's 4th
    field counts the running and runnable scheduling entities, the reader included)."""
    counts = []
    for _ in range(samples):
        with open("/proc/loadavg") as f:
            counts.append(int(f.read().split()[3].split("/")[0]) - 1)
        time.sleep(interval_s)
    return statistics.mean(counts)


class LoadMonitor(threading.Thread):
    """Samples the runnable-task count every 50 ms while a run goes on."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            with open("/proc/loadavg") as f:
                self.samples.append(int(f.read().split()[3].split("/")[0]))
            time.sleep(0.05)


def wait_for_quiet(limit, timeout_s):
    """Waits until other processes leave the cores alone (mean runnable <= limit), at most
    timeout_s; returns the last figure seen."""
    deadline = time.time() + timeout_s
    while True:
        busy = runnable_others()
        if busy <= limit or time.time() > deadline:
            return busy
        time.sleep(1.0)


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def trimmed_mean(values):
    """The interquartile mean: without the lowest and the highest len // 4 values, as the
    profile's fed-back factors are averaged (cost_model/pricing/profile_feedback.h)."""
    ordered = sorted(values)
    drop = len(ordered) // 4
    return statistics.mean(ordered[drop:len(ordered) - drop])


def round_schedule(feedback, evaluated):
    """One round's runs, as ("feedback" | "evaluate", plan name): the feedback runs spread
    evenly among the evaluated ones, so that the factors are fitted over the same minutes
    as the plans are measured (the machine's speed drifts over minutes)."""
    schedule = [("evaluate", name) for name in evaluated]
    for i, name in enumerate(feedback):
        schedule.insert(round(i * len(evaluated) / len(feedback)) + i, ("feedback", name))
    return schedule


def rel(predicted, measured):
    return (predicted - measured) / measured if measured else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", required=True, help="the strata binary")
    ap.add_argument("--work", default="loop-accuracy", help="scratch directory")
    ap.add_argument("--profile", help="use this profile instead of calibrating")
    ap.add_argument("--steps", type=int, default=15, help="steps per run (first is warm-up)")
    ap.add_argument("--rounds", type=int, default=9, help="interleaved runs per plan")
    ap.add_argument("--plans", nargs="*",
                    help="names of the plans to evaluate (default: every plan of the matrix "
                         "that is not a feedback plan)")
    ap.add_argument("--step-bound", type=float, default=0.15)
    ap.add_argument("--mem-bound", type=float, default=0.05)
    ap.add_argument("--rank-bound", type=float, default=0.05)
    ap.add_argument("--quiet-limit", type=float, default=0.5,
                    help="before each run, wait until at most this many other tasks are "
                         "runnable (the machine is shared)")
    ap.add_argument("--quiet-timeout", type=float, default=60.0,
                    help="seconds to wait for that before running anyway")
    ap.add_argument("--retries", type=int, default=2,
                    help="runs again (after waiting) when other tasks were runnable during it")
    ap.add_argument("--feedback-plans", default="single,dp2-z0,single-mb4,tp2,tp2-sp,dp2-z3,tp2-dp2",
                    help="comma-separated plans of the matrix run with --update-profile at the "
                         "start of every round ('' for none)")
    ap.add_argument("--calibrate-args",
                    default="--threads 1 --model tiny --micro-batch 1 2 4 8 --tp 1 2 4",
                    help="extra arguments of `strata calibrate`")
    args = ap.parse_args()

    # One thread per rank for every plan, as `strata run` gives each rank of a plan of >= 2
    # ranks on 2 cores; a 1-rank run would otherwise get 2 OpenMP + 2 OpenBLAS threads,
    # which spin against each other and against the other processes of a shared machine.
    # The calibration times the kernels at the same count (--threads 1).
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    os.makedirs(args.work, exist_ok=True)
    log = os.path.join(args.work, "commands.log")
    open(log, "w").close()
    names = [n for n, _ in PLANS]
    # The loop's feedback plans (run with --update-profile at the start of every round).
    feedback = [n for n in args.feedback_plans.split(",") if n]
    unknown = [n for n in feedback if n not in names]
    if unknown:
        sys.stderr.write(f"loop_accuracy: --feedback-plans: {unknown} not in {names}\n")
        return 2
    if args.plans:
        unknown = [n for n in args.plans if n not in names]
        if unknown:
            sys.stderr.write(f"loop_accuracy: --plans: {unknown} not in {names}\n")
            return 2
        fed_back = [n for n in args.plans if n in feedback]
        if fed_back:
            sys.stderr.write(f"loop_accuracy: --plans: {fed_back} also in --feedback-plans "
                             f"{feedback}: a plan that fed the profile cannot be held out\n")
            return 2
    plans = [(n, p) for n, p in PLANS
             if (n in args.plans if args.plans else n not in feedback)]
    if not plans:
        sys.stderr.write(f"loop_accuracy: no plan left to evaluate: the matrix {names} less "
                         f"the feedback plans {feedback}\n")
        return 2
    plan_ranks = {n: p.get("tp", 1) * p.get("pp", 1) * p.get("dp", 1) for n, p in PLANS}
    # The calibration measures up to the most ranks any run of the loop uses, fed back or not.
    ranks = max(plan_ranks[n] for n in [n for n, _ in plans] + feedback)
    print(f"load average before: {load_average()} ({os.cpu_count()} cores)")

    profile = args.profile
    if profile is not None:  # the feedback runs below update a copy, never the caller's file
        copy = os.path.join(args.work, "profile.json")
        if os.path.abspath(profile) != os.path.abspath(copy):
            shutil.copyfile(profile, copy)
        profile = copy
    else:
        profile = os.path.join(args.work, "profile.json")
        t0 = time.time()
        wait_for_quiet(args.quiet_limit, args.quiet_timeout)
        run([args.strata, "calibrate", "--backend", "cpu", "--ranks", str(max(ranks, 2)),
             "--out", profile] + args.calibrate_args.split(), log)
        print(f"calibrated in {time.time() - t0:.0f} s: {profile}")

    spec = ["--model", "tiny", "--cluster", "local-cpu", "--train", "tiny"]
    for name, fields in PLANS:
        with open(os.path.join(args.work, f"{name}.plan.json"), "w") as f:
            json.dump(dict(BASE_PLAN, **fields), f, indent=2)
    measured = {name: [] for name, _ in plans}
    busy_before = {name: [] for name, _ in plans}
    mem = {}
    for r in range(args.rounds):
        for kind, name in round_schedule(feedback, [n for n, _ in plans]):
            if kind == "feedback":
                wait_for_quiet(args.quiet_limit, args.quiet_timeout)
                out = run([args.strata, "run", "--plan",
                           os.path.join(args.work, f"{name}.plan.json"), "--steps", str(args.steps),
                           "--out", os.path.join(args.work, f"{name}.feedback{r}"),
                           "--profile", profile, "--update-profile", profile] + spec, log)
                print(f"round {r} feedback {name}: " + (out.strip().splitlines() or [""])[-1])
                continue
            out_dir = os.path.join(args.work, f"{name}.run{r}")
            ranks = plan_ranks[name]
            for attempt in range(args.retries + 1):
                wait_for_quiet(args.quiet_limit, args.quiet_timeout)
                monitor = LoadMonitor()
                monitor.start()
                run([args.strata, "run", "--plan", os.path.join(args.work, f"{name}.plan.json"),
                     "--steps", str(args.steps), "--out", out_dir] + spec, log)
                monitor.stop.set()
                monitor.join()
                # Runnable tasks besides the sampler and this run's ranks (a rank waiting in
                # MPI spins, so it counts as runnable): the others' load during the run.
                others = max(0.0, statistics.median(monitor.samples or [0]) - 1 - ranks)
                if others <= args.quiet_limit:
                    break
            busy_before[name].append(others)
            with open(os.path.join(out_dir, "report.json")) as f:
                report = json.load(f)
            measured[name].append(report["step_time_s"])
            mem[name] = report["memory_bytes"]["device"]

    # The predictions: from the profile as every feedback run left it.
    predicted = {}
    for name, fields in plans:
        path = os.path.join(args.work, f"{name}.plan.json")
        out = run([args.strata, "predict", "--json", "--profile", profile, "--plan", path] + spec,
                  log)
        predicted_path = os.path.join(args.work, f"{name}.predicted.json")
        with open(predicted_path, "w") as f:
            f.write(out)
        predicted[name] = json.loads(out)
        # The field-by-field table of the last round, for the log.
        run([args.strata, "compare", "--predicted", predicted_path, "--measured",
             os.path.join(args.work, f"{name}.run{args.rounds - 1}", "report.json")], log)
    print(f"load average after:  {load_average()}")

    ok = True
    rows = []
    for name, _ in plans:
        p = predicted[name]
        m_step = trimmed_mean(measured[name])
        p_step = p["step_time_s"]
        p_mem = p["memory_bytes"]["device"]
        e_step = rel(p_step, m_step)
        e_mem = rel(p_mem, mem[name])
        bad = abs(e_step) > args.step_bound or abs(e_mem) > args.mem_bound
        ok = ok and not bad
        runs = [f"{x:.4f}@{b:.1f}" for x, b in zip(measured[name], busy_before[name])]
        rows.append((name, p_step, m_step, e_step, p_mem, mem[name], e_mem, runs, bad))

    print(f"\n{'plan':<10} {'pred step':>10} {'meas step':>10} {'error':>7}   "
          f"{'pred mem':>10} {'meas mem':>10} {'error':>7}   runs: median step s @ other tasks runnable during the run")
    for name, ps, ms, es, pm, mm, em, runs, bad in rows:
        print(f"{name:<10} {ps * 1e3:>8.2f}ms {ms * 1e3:>8.2f}ms {es:>+7.1%}   "
              f"{pm / 2**20:>7.2f}MiB {mm / 2**20:>7.2f}MiB {em:>+7.1%}   "
              f"{' '.join(runs)}{'  FAIL' if bad else ''}")

    fastest_pred = min(rows, key=lambda r: r[1])
    fastest_meas = min(rows, key=lambda r: r[2])
    slack = fastest_pred[2] / fastest_meas[2] - 1.0
    rank_ok = slack <= args.rank_bound
    ok = ok and rank_ok
    print(f"\nranking: predicted fastest {fastest_pred[0]} is measured at {fastest_pred[2] * 1e3:.2f} ms,"
          f" measured fastest {fastest_meas[0]} at {fastest_meas[2] * 1e3:.2f} ms"
          f" ({slack:+.1%}, bound {args.rank_bound:.0%}){'' if rank_ok else '  FAIL'}")
    worst_step = max(abs(r[3]) for r in rows)
    worst_mem = max(abs(r[6]) for r in rows)
    print(f"worst step error {worst_step:.1%} (bound {args.step_bound:.0%}), "
          f"worst memory error {worst_mem:.1%} (bound {args.mem_bound:.0%}): "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
