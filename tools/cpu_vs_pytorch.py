#!/usr/bin/env python3
"""strata's CPU backend against the same GPT in plain PyTorch: per-step time, one process each.

Issue 19 measured strata 1.28x slower than PyTorch at one thread on a GPT of 4 layers, hidden
256, 4 heads, sequence 256, byte vocabulary, batch 8. This script repeats that measurement:
  1. random weights (check_against_pytorch.py's random_weights, GPT-2 names and layouts) are
     written once as init.safetensors; the batches are the ones strata samples
     (`strata data --print-batches`), so both sides train the same weights on the same data;
  2. for each thread count, --pairs alternating runs: `strata run --backend cpu` (plan
     t1 p1 d1, micro-batch = global batch, no recompute) with OMP_NUM_THREADS =
     OPENBLAS_NUM_THREADS = n, then a PyTorch process with torch.set_num_threads(n) and the
     same variables, each training --warmup + --steps AdamW steps;
  3. each run's step time is the median of its timed steps (strata: tokens / tokens_per_s of
     metrics.jsonl, the engine's own step clock; PyTorch: perf_counter around forward,
     backward and the optimizer step); the table shows, per thread count, the median over
     runs of each side and the median of the per-pair ratios strata / PyTorch (> 1: strata
     slower). Alternating runs share the machine's noise between the two sides.

PyTorch's side is check_against_pytorch.py's loss_of (eager, materialised masked softmax,
tanh GeLU, tied output layer) with torch.optim.AdamW (foreach=False, as there): what
PyTorch 1.13 (Debian's python3-torch) runs for a GPT written by hand.

Not part of ctest (timings). On a shared or busy machine the figures move between runs: quote
the medians with the number of pairs. Both processes get the caller's environment with the
two thread variables set; strata's launcher adds OMP_WAIT_POLICY=passive when it is unset
(mpi_launch.h), PyTorch runs with libgomp's default unless the caller sets it. Usage, from
the repository root, with the interpreter that has torch (Debian's /usr/bin/python3):
    /usr/bin/python3 tools/cpu_vs_pytorch.py --strata build/tools/strata/strata
        [--threads 1,2] [--pairs 5] [--steps 6] [--warmup 2] [--work DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import torch
    from check_against_pytorch import loss_of, random_weights, save_safetensors
except ImportError as e:  # pragma: no cover
    print(f"torch is not importable ({e}); tools/install_deps.sh installs python3-torch")
    sys.exit(77)

MODEL = {"name": "gpt-4l-256h", "layers": 4, "hidden": 256, "heads": 4, "seq_len": 256,
         "vocab": 256, "ffn_hidden": 1024}
BATCH = 8
OPTIMIZER = {"name": "adamw", "lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
             "weight_decay": 0.0, "grad_clip": 0.0}


def train_spec(steps):
    return {"global_batch": BATCH, "precision": "fp32", "seed": 7, "steps": steps,
            "optimizer": OPTIMIZER}


PLAN = {"tp": 1, "pp": 1, "dp": 1, "virtual_stages": 1, "micro_batch": BATCH, "schedule": "1f1b",
        "zero_stage": 0, "recompute": "none", "sequence_parallel": False,
        "offload": {"optimizer": "none", "gradients": "none", "params": "none"}}


def thread_env(n):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(n)
    env["OPENBLAS_NUM_THREADS"] = str(n)
    return env


def strata_step_times(strata, work, paths, threads, tag):
    out = os.path.join(work, f"strata-{tag}")
    os.makedirs(out, exist_ok=True)
    cmd = [strata, "run", "--plan", paths["plan"], "--model", paths["model"], "--train",
           paths["train"], "--backend", "cpu", "--init-from", paths["init"], "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True, env=thread_env(threads))
    if r.returncode != 0:
        print(" ".join(cmd), r.stdout[-2000:], r.stderr[-2000:], sep="\n")
        raise SystemExit(f"strata exited {r.returncode}")
    tokens = BATCH * MODEL["seq_len"]
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    return [tokens / l["tokens_per_s"] for l in lines], [l["loss"] for l in lines]


def torch_worker(args):
    """The PyTorch side, in its own process: prints one JSON line of step times and losses."""
    torch.set_num_threads(args.worker_threads)
    init = torch.load(args.worker_init)
    batches = torch.load(args.worker_batches)
    w = {k: v.clone().requires_grad_(True) for k, v in init.items()}
    adamw = torch.optim.AdamW(list(w.values()), lr=OPTIMIZER["lr"],
                              betas=(OPTIMIZER["beta1"], OPTIMIZER["beta2"]),
                              eps=OPTIMIZER["eps"], weight_decay=0.0, foreach=False)
    times, losses = [], []
    for tokens in batches:
        t0 = time.perf_counter()
        adamw.zero_grad(set_to_none=True)
        loss = loss_of(MODEL, w, tokens)
        loss.backward()
        adamw.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    print(json.dumps({"times": times, "losses": losses}))


def torch_step_times(work, threads):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker-threads", str(threads),
           "--worker-init", os.path.join(work, "init.pt"),
           "--worker-batches", os.path.join(work, "batches.pt")]
    r = subprocess.run(cmd, capture_output=True, text=True, env=thread_env(threads))
    if r.returncode != 0:
        print(r.stdout[-2000:], r.stderr[-2000:], sep="\n")
        raise SystemExit(f"PyTorch worker exited {r.returncode}")
    result = json.loads(r.stdout.strip().splitlines()[-1])
    return result["times"], result["losses"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--strata")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--pairs", type=int, default=5, help="alternating runs per thread count")
    ap.add_argument("--steps", type=int, default=6, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps before them")
    ap.add_argument("--work", default="out/cpu-vs-pytorch")
    ap.add_argument("--worker-threads", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--worker-init", help=argparse.SUPPRESS)
    ap.add_argument("--worker-batches", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker_threads:
        torch_worker(a)
        return 0
    if not a.strata:
        ap.error("--strata is required")
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    steps = a.warmup + a.steps
    paths = {k: os.path.join(work, f"{k}.json") for k in ("model", "train", "plan")}
    json.dump(MODEL, open(paths["model"], "w"))
    json.dump(train_spec(steps), open(paths["train"], "w"))
    json.dump(PLAN, open(paths["plan"], "w"))
    init = random_weights(MODEL, 11)
    paths["init"] = os.path.join(work, "init.safetensors")
    save_safetensors(paths["init"], init)
    torch.save(init, os.path.join(work, "init.pt"))
    lines = subprocess.run([a.strata, "data", "--print-batches", str(steps), "--model",
                            paths["model"], "--train", paths["train"]],
                           capture_output=True, text=True, check=True).stdout
    batches = [torch.tensor(json.loads(l)["tokens"], dtype=torch.long) for l in lines.splitlines()]
    torch.save(batches, os.path.join(work, "batches.pt"))

    print(f"model: {MODEL['layers']} layers, hidden {MODEL['hidden']}, {MODEL['heads']} heads, "
          f"seq {MODEL['seq_len']}, vocab {MODEL['vocab']}, batch {BATCH}; torch "
          f"{torch.__version__}; {os.cpu_count()} cores; {a.pairs} alternating pairs of "
          f"{a.warmup} + {a.steps} steps (medians of the timed steps)")
    rows = []
    for n in [int(x) for x in a.threads.split(",")]:
        strata_runs, torch_runs, ratios = [], [], []
        for p in range(a.pairs):
            s_times, s_losses = strata_step_times(a.strata, work, paths, n, f"t{n}-{p}")
            t_times, t_losses = torch_step_times(work, n)
            s_med = statistics.median(s_times[a.warmup:])
            t_med = statistics.median(t_times[a.warmup:])
            strata_runs.append(s_med)
            torch_runs.append(t_med)
            ratios.append(s_med / t_med)
            # Same weights and batches: the first losses agree to fp32 rounding.
            print(f"threads {n} pair {p + 1}: strata {s_med * 1e3:.1f} ms, pytorch "
                  f"{t_med * 1e3:.1f} ms, ratio {s_med / t_med:.2f} (step-1 loss strata "
                  f"{s_losses[0]:.5f} pytorch {t_losses[0]:.5f})", flush=True)
        rows.append((n, statistics.median(strata_runs), statistics.median(torch_runs),
                     statistics.median(ratios), min(ratios), max(ratios)))
    print("\n| threads | strata step (median) | PyTorch step (median) | strata / PyTorch "
          "(median of pairs) | range |")
    print("|---|---|---|---|---|")
    for n, s, t, r, lo, hi in rows:
        print(f"| {n} | {s * 1e3:.1f} ms | {t * 1e3:.1f} ms | {r:.2f} | {lo:.2f}-{hi:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
