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

--model picks the GPT (the 4-layer one above, or gpt-12l-384h: 12 layers, hidden 384, 6 heads,
sequence 512, byte vocabulary, batch 4, a GPT-2 of reduced width); --ranks 2 runs data
parallel: strata's plan d2 (two MPI ranks, half the batch each) against two PyTorch processes
under DistributedDataParallel over gloo (each half the batch, gradients all-reduced by DDP),
with --threads threads per rank on both sides; PyTorch's step time is rank 0's.

PyTorch's side is check_against_pytorch.py's loss_of (eager, materialised masked softmax,
tanh GeLU, tied output layer) with torch.optim.AdamW (foreach=False, as there): what
PyTorch 1.13 (Debian's python3-torch) runs for a GPT written by hand.

Not part of ctest (timings). On a shared or busy machine the figures move between runs: quote
the medians with the number of pairs. Both processes get the caller's environment with the
two thread variables set; strata's launcher adds OMP_WAIT_POLICY=passive when it is unset
(mpi_launch.h), PyTorch runs with libgomp's default unless the caller sets it. Usage, from
the repository root, with the interpreter that has torch (Debian's /usr/bin/python3):
    /usr/bin/python3 tools/cpu_vs_pytorch.py --strata build/tools/strata/strata
        [--model gpt-4l-256h|gpt-12l-384h] [--ranks 1|2]
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

# name -> (model, global batch)
MODELS = {
    "gpt-4l-256h": ({"name": "gpt-4l-256h", "layers": 4, "hidden": 256, "heads": 4,
                     "seq_len": 256, "vocab": 256, "ffn_hidden": 1024}, 8),
    "gpt-12l-384h": ({"name": "gpt-12l-384h", "layers": 12, "hidden": 384, "heads": 6,
                      "seq_len": 512, "vocab": 256, "ffn_hidden": 1536}, 4),
}
MODEL, BATCH = MODELS["gpt-4l-256h"]
OPTIMIZER = {"name": "adamw", "lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
             "weight_decay": 0.0, "grad_clip": 0.0}


def train_spec(steps):
    return {"global_batch": BATCH, "precision": "fp32", "seed": 7, "steps": steps,
            "optimizer": OPTIMIZER}


def plan_spec(ranks):
    return {"tp": 1, "pp": 1, "dp": ranks, "virtual_stages": 1, "micro_batch": BATCH // ranks,
            "schedule": "1f1b", "zero_stage": 0, "recompute": "none", "sequence_parallel": False,
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


class Gpt(torch.nn.Module):
    """loss_of's weights as a module, for DistributedDataParallel."""

    def __init__(self, init):
        super().__init__()
        self.names = list(init)
        self.weights = torch.nn.ParameterList(torch.nn.Parameter(init[n].clone()) for n in self.names)

    def forward(self, tokens):
        return loss_of(MODEL, dict(zip(self.names, self.weights)), tokens)


def torch_worker(args):
    """The PyTorch side, in its own process (one per rank): prints one JSON line of step
    times and losses (the mean over ranks)."""
    torch.set_num_threads(args.worker_threads)
    init = torch.load(args.worker_init)
    batches = torch.load(args.worker_batches)
    world, rank = args.worker_world, args.worker_rank
    if world > 1:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.worker_port}",
                                rank=rank, world_size=world)
        model = DistributedDataParallel(Gpt(init))
        params = list(model.parameters())
        step = model
    else:
        w = {k: v.clone().requires_grad_(True) for k, v in init.items()}
        params = list(w.values())
        step = lambda tokens: loss_of(MODEL, w, tokens)
    adamw = torch.optim.AdamW(params, lr=OPTIMIZER["lr"],
                              betas=(OPTIMIZER["beta1"], OPTIMIZER["beta2"]),
                              eps=OPTIMIZER["eps"], weight_decay=0.0, foreach=False)
    rows = BATCH // world
    times, losses = [], []
    for tokens in batches:
        mine = tokens[rank * rows:(rank + 1) * rows]
        t0 = time.perf_counter()
        adamw.zero_grad(set_to_none=True)
        loss = step(mine)
        loss.backward()
        adamw.step()
        times.append(time.perf_counter() - t0)
        if world > 1:  # outside the timed step: the global batch's mean loss
            loss = loss.detach().clone()
            dist.all_reduce(loss)
            loss /= world
        losses.append(loss.item())
    if rank == 0:
        print(json.dumps({"times": times, "losses": losses}))
    if world > 1:
        dist.destroy_process_group()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_step_times(work, threads, ranks, model_name):
    port = free_port()
    procs = []
    for r in range(ranks):
        cmd = [sys.executable, os.path.abspath(__file__), "--model", model_name,
               "--worker-threads", str(threads), "--worker-rank", str(r),
               "--worker-world", str(ranks), "--worker-port", str(port),
               "--worker-init", os.path.join(work, "init.pt"),
               "--worker-batches", os.path.join(work, "batches.pt")]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=thread_env(threads)))
    outs = [p.communicate() for p in procs]
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0:
            print(out[-2000:], err[-2000:], sep="\n")
            raise SystemExit(f"PyTorch worker exited {p.returncode}")
    result = json.loads(outs[0][0].strip().splitlines()[-1])
    return result["times"], result["losses"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--strata")
    ap.add_argument("--model", default="gpt-4l-256h", choices=sorted(MODELS))
    ap.add_argument("--ranks", type=int, default=1, choices=[1, 2],
                    help="2: data parallel, strata d2 against PyTorch DDP over gloo")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--pairs", type=int, default=5, help="alternating runs per thread count")
    ap.add_argument("--steps", type=int, default=6, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps before them")
    ap.add_argument("--work", default="out/cpu-vs-pytorch")
    ap.add_argument("--worker-threads", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--worker-rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--worker-world", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--worker-port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--worker-init", help=argparse.SUPPRESS)
    ap.add_argument("--worker-batches", help=argparse.SUPPRESS)
    a = ap.parse_args()
    global MODEL, BATCH
    MODEL, BATCH = MODELS[a.model]
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
    json.dump(plan_spec(a.ranks), open(paths["plan"], "w"))
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
          f"seq {MODEL['seq_len']}, vocab {MODEL['vocab']}, batch {BATCH}, {a.ranks} rank(s); torch "
          f"{torch.__version__}; {os.cpu_count()} cores; {a.pairs} alternating pairs of "
          f"{a.warmup} + {a.steps} steps (medians of the timed steps)")
    rows = []
    for n in [int(x) for x in a.threads.split(",")]:
        strata_runs, torch_runs, ratios = [], [], []
        for p in range(a.pairs):
            s_times, s_losses = strata_step_times(a.strata, work, paths, n, f"t{n}-{p}")
            t_times, t_losses = torch_step_times(work, n, a.ranks, a.model)
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
