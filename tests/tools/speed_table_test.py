#!/usr/bin/env python3
"""tools/device/speed_table.py, the speed phase's verdict, on made-up runs: the ratio is
strata's tokens/s over PyTorch's from their files; a model under its ratio target or its MFU
floor, a missing side and a trace without kernel spans fail, naming the model; the table puts
each side's ops by GPU time side by side (strata's kernel spans summed by name, its tail ops
too, other spans not), largest first, cut at --top; a --cuda-graphs report beside a run shows its
speed-up, the target is met by the faster run, and graphs losses that are not the run's fail.
Usage: speed_table_test.py PYTHON SCRIPT
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


def event(name, cat, dur_us):
    return {"name": name, "cat": cat, "ph": "X", "ts": 0, "dur": dur_us, "pid": 0, "tid": 0,
            "args": {}}


def write_model(work, name, strata_tps, torch_tps, mfu=0.5, kernels=True):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    json.dump({"tokens_per_s": strata_tps, "mfu": mfu, "memory_bytes": {"device": 2 * 2**30},
               "losses": [5.0, 4.5]}, open(f"{d}/report.json", "w"))
    events = [event("forward", "compute", 9000)]  # an op span: not a layer op, not counted
    if kernels:
        # matmul_backward twice (3 + 4 ms), attention_forward once (2 ms), the optimizer (1 ms).
        events += [event("matmul_backward", "kernel", 3000), event("matmul_backward", "kernel", 4000),
                   event("attention_forward", "kernel", 2000), event("optimizer_step", "tail", 1000)]
    json.dump({"traceEvents": events}, open(f"{d}/trace.json", "w"))
    with open(f"{d}/pytorch.json", "w") as f:
        f.write("compile output\n")  # a script's stdout: the JSON is its last line
        f.write(json.dumps({"tokens_per_s": torch_tps, "mfu": 0.4, "peak_mem_gib": 3.0,
                            "profiled_gpu_ms": 10.0,
                            "top_kernels": [{"name": "sm90_gemm", "ms": 6.0, "calls": 48},
                                            {"name": "flash_fwd", "ms": 4.0, "calls": 12}]}) + "\n")
    return f"{name}={d}/report.json:{d}/trace.json:{d}/pytorch.json"


def run(python, script, work, *args):
    table = os.path.join(work, "table.txt")
    p = subprocess.run([python, script, "--table", table, *args], capture_output=True, text=True)
    text = open(table).read() if os.path.exists(table) else ""
    return p.returncode, p.stdout.strip(), text


def main():
    python, script = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as work:
        a = write_model(work, "gpt2-124m", 1200.0, 1000.0)
        b = write_model(work, "llama", 1050.0, 1000.0, mfu=0.3)
        rc, line, table = run(python, script, work, "--target", "gpt2-124m=1.15", "--target",
                              "llama=1.10", a)
        check("1200 / 1000 = 1.200 meets 1.15: exit 0", rc == 0, f"{rc}: {line}")
        check("the line gives the ratio", "gpt2-124m 1.200" in line, line)
        rows = [r for r in table.splitlines() if "ms" in r and "|" in r and "GPU time" not in r]
        check("strata's side: matmul_backward summed (7 ms, 2 calls) first",
              rows and "matmul_backward" in rows[0] and "7.00 ms     2" in rows[0], table)
        check("PyTorch's side: sm90_gemm (6 ms, 60%) first",
              rows and "sm90_gemm" in rows[0] and "60.0%" in rows[0], table)
        check("the tail's optimizer counted, the forward op span not",
              "optimizer_step" in table and "\n  forward " not in table, table)
        check("strata's busy time is the counted spans' 10 ms", "spans: 10.00 ms" in table, table)
        rc, line, table = run(python, script, work, "--top", "1", a)
        check("--top 1 keeps one row a side", "attention_forward" not in table, table)

        rc, line, _ = run(python, script, work, "--target", "gpt2-124m=1.15", "--target",
                          "llama=1.10", a, b)
        check("llama at 1.050 < 1.10 fails, naming it", rc == 1 and "llama ratio 1.050 < 1.10" in line,
              f"{rc}: {line}")
        rc, line, _ = run(python, script, work, "--min-mfu", "llama=0.5", b)
        check("an MFU of 30% under a 50% floor fails", rc == 1 and "llama MFU 30.0% < 50%" in line,
              f"{rc}: {line}")
        c = write_model(work, "no-kernels", 1000.0, 1000.0, kernels=False)
        rc, line, _ = run(python, script, work, c)
        check("a trace without kernel spans fails", rc == 1 and "no kernel spans" in line, line)
        os.remove(os.path.join(work, "no-kernels", "pytorch.json"))
        rc, line, _ = run(python, script, work, c)
        check("a missing PyTorch result fails, naming the model",
              rc == 1 and "no-kernels: no PyTorch result" in line, line)
        # b at 1050 tokens/s misses 1.10; its --cuda-graphs run at 1155 (1.100x) meets it.
        graphs = os.path.join(work, "llama", "graphs.json")
        json.dump({"tokens_per_s": 1155.0, "losses": [5.0, 4.5], "captured_steps": True},
                  open(graphs, "w"))
        rc, line, table = run(python, script, work, "--target", "llama=1.10", f"{b}:{graphs}")
        check("the faster --cuda-graphs run meets the target: exit 0", rc == 0, f"{rc}: {line}")
        check("the table gives the graphs run's speed-up", "(1.100x op by op)" in table, table)
        json.dump({"tokens_per_s": 1155.0, "losses": [5.0, 4.6], "captured_steps": True},
                  open(graphs, "w"))
        rc, line, _ = run(python, script, work, f"{b}:{graphs}")
        check("graphs losses that are not the run's fail", rc == 1 and "--cuda-graphs losses" in line,
              f"{rc}: {line}")
        json.dump({"tokens_per_s": 1155.0, "losses": [5.0, 4.5]}, open(graphs, "w"))
        rc, line, _ = run(python, script, work, f"{b}:{graphs}")
        check("a graphs run that did not capture fails", rc == 1 and "did not capture" in line,
              f"{rc}: {line}")
        rc, _, _ = run(python, script, work, "gpt2-124m=only-one-file")
        check("a malformed run argument exits 2", rc == 2, str(rc))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
