#!/usr/bin/env python3
"""Times `strata run` from the command to the line before step 1 (issues 25 and 38), then
stops it: by default `--plan tiny-single --model gpt2-350m --train tiny --steps 1`; any of
those given after the output directory replace the default (an offload plan, a larger model).

Prints each line of the run with the wall seconds and the process's CPU seconds (user +
sys, every thread, from /proc) at the moment it came, and a last line
`SETUP threads N wall W s cpu C s`. The step itself is not run: the process is killed at
the line `strata run: t1 p1 ...` that comes before it, and the NVMe run directory it leaves
under --nvme-dir is removed (so that the next run's set-up does not pay for its removal).
Linux only (/proc).

With --against OTHER_STRATA and --reps N, the two binaries run alternately N times each and
the medians of both, and their ratio (other / this), are printed last.

  tools/bench/run_setup_time.py build/tools/strata/strata 2 /tmp/out --device-budget-mib 8000
  tools/bench/run_setup_time.py after/strata 2 /tmp/out --against before/strata --reps 3 \\
      --plan z3-offload.json --model gpt2-774m --nvme-dir /tmp/nvme

Arguments after the output directory go to `strata run` as they are.
"""
import argparse
import glob
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick  # utime + stime


def option_value(args, name):
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def command(strata, threads, out, extra):
    defaults = {"--plan": "tiny-single", "--model": "gpt2-350m", "--train": "tiny", "--steps": "1"}
    cmd = [strata, "run"]
    for name, value in defaults.items():
        if option_value(extra, name) is None:
            cmd += [name, value]
    return cmd + ["--threads", threads, "--out", out] + extra


def time_setup(cmd, nvme_dir):
    """(wall, cpu) seconds from the command to the line before step 1, printing the lines."""
    start = time.monotonic()
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           bufsize=1)
    result = None
    for line in run.stdout:
        wall, cpu = time.monotonic() - start, cpu_seconds(run.pid)
        print(f"{wall:7.2f} wall {cpu:6.2f} cpu | {line}", end="", flush=True)
        words = line.split()
        if line.startswith("strata run: t") and len(words) > 3 and words[3].startswith("p"):
            result = (wall, cpu)
            run.send_signal(signal.SIGKILL)
            break
    run.wait()
    if nvme_dir:
        for d in glob.glob(os.path.join(nvme_dir, "strata-*")):
            shutil.rmtree(d, ignore_errors=True)
    if result is None:
        sys.exit(f"run_setup_time: {cmd[0]} ended (exit code {run.returncode}) before step 1")
    return result


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("strata")
    ap.add_argument("threads")
    ap.add_argument("out")
    ap.add_argument("--against", help="another strata binary, run alternately with this one")
    ap.add_argument("--reps", type=int, default=1)
    a, extra = ap.parse_known_args()
    nvme_dir = option_value(extra, "--nvme-dir")
    sides = [("this", a.strata)] + ([("other", a.against)] if a.against else [])
    times = {name: [] for name, _ in sides}
    for _ in range(a.reps):
        for name, strata in sides:
            wall, cpu = time_setup(command(strata, a.threads, a.out, extra), nvme_dir)
            print(f"SETUP {name} threads {a.threads} wall {wall:.2f} s cpu {cpu:.2f} s", flush=True)
            times[name].append((wall, cpu))
    medians = {name: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t))
               for name, t in times.items()}
    for name, strata in sides:
        wall, cpu = medians[name]
        print(f"MEDIAN {name} ({strata}) of {a.reps}: wall {wall:.2f} s cpu {cpu:.2f} s")
    if a.against:
        (tw, tc), (ow, oc) = medians["this"], medians["other"]
        print(f"RATIO other / this: wall {ow / tw:.2f}x cpu {oc / tc:.2f}x")


if __name__ == "__main__":
    main()
