#!/usr/bin/env python3
"""Times `strata run --plan tiny-single --model gpt2-350m --train tiny --steps 1` from the
command to the line before step 1 (issue 25), then stops it.

Prints each line of the run with the wall seconds and the process's CPU seconds (user +
sys, every thread, from /proc) at the moment it came, and a last line
`SETUP threads N wall W s cpu C s`. The step itself is not run: the process is killed at
the line `strata run: t1 p1 ...` that comes before it. Linux only (/proc).

  tools/bench/run_setup_time.py build/tools/strata/strata 2 /tmp/out --device-budget-mib 8000

Arguments after the output directory go to `strata run` as they are.
"""
import os
import signal
import subprocess
import sys
import time


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick  # utime + stime


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    strata, threads, out = sys.argv[1], sys.argv[2], sys.argv[3]
    cmd = [strata, "run", "--plan", "tiny-single", "--model", "gpt2-350m", "--train", "tiny",
           "--steps", "1", "--threads", threads, "--out", out] + sys.argv[4:]
    start = time.monotonic()
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           bufsize=1)
    for line in run.stdout:
        wall, cpu = time.monotonic() - start, cpu_seconds(run.pid)
        print(f"{wall:7.2f} wall {cpu:6.2f} cpu | {line}", end="", flush=True)
        if line.startswith("strata run: t1 p1"):
            print(f"SETUP threads {threads} wall {wall:.2f} s cpu {cpu:.2f} s", flush=True)
            run.send_signal(signal.SIGKILL)
            break
    run.wait()


if __name__ == "__main__":
    main()
