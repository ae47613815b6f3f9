#!/usr/bin/env python3
"""strata's CPU AdamW against PyTorch's CPU AdamW on the same array sizes (issue 38).

  /usr/bin/python3 tools/bench/cpu_adam_vs_pytorch.py build/tools/bench/strata_cpu_adam_bench \
      [--rounds 5] [--reps 5] [--working-set-bytes B]

Each round runs strata_cpu_adam_bench (strata's AdamW, with and without the bf16 copy: the
median of --reps; the machine's memory bandwidth: the fastest repeat, as STREAM reports),
then PyTorch's AdamW in each form this torch has (the default; foreach=True; fused=True
where AdamW takes it), --reps steps each after a warm-up, on one fp32 tensor of the same parameter count: parameters, gradients and
both moments out of the cache alike. Rounds alternate the two sides, so that a noisy
neighbour hits both; every figure printed is the median over rounds, and each ratio the
median of the rounds' own ratios. Same hyper-parameters both sides (lr 1e-3, betas 0.9 and
0.95, eps 1e-8, weight decay 0.1), torch on as many threads as strata (all cores).
"""
import argparse
import datetime
import inspect
import platform
import statistics
import subprocess
import sys
import time


def strata_round(bench, reps, working_set):
    cmd = [bench, "--reps", str(reps)]
    if working_set:
        cmd += ["--working-set-bytes", str(working_set)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def torch_forms(torch):
    """The AdamW forms this torch has: name -> keyword arguments."""
    forms = {"default": {}}
    accepted = inspect.signature(torch.optim.AdamW).parameters
    if "foreach" in accepted:
        forms["foreach"] = {"foreach": True}
    if "fused" in accepted:
        forms["fused"] = {"fused": True}
    return forms


def torch_round(torch, p, forms, reps):
    """Median seconds of one AdamW step per form (each form its own moments, freed after)."""
    seconds = {}
    for name, kwargs in forms.items():
        try:
            opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                                    weight_decay=0.1, **kwargs)
            opt.step()  # warm-up: the moments allocated and touched
        except (RuntimeError, ValueError) as e:  # e.g. fused=True only on CUDA tensors
            seconds[name] = None
            print(f"# torch AdamW {name}: not on the CPU in this torch ({e})", file=sys.stderr)
            continue
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - start)
        seconds[name] = statistics.median(times)
        del opt  # frees the moments before the next form allocates its own
    # Context, not a side: PyTorch's single-tensor AdamW allocates temporaries of n floats
    # each step (sqrt, the division by the bias correction), which the allocator hands back
    # to the OS; what one such fresh tensor costs here (page faults, zeroing) says how much
    # of its step that is on this machine.
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fresh = p.detach().sqrt()
        times.append(time.perf_counter() - start)
        del fresh
    seconds["fresh_tensor"] = statistics.median(times)
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench", help="path of strata_cpu_adam_bench")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--working-set-bytes", type=int, default=0,
                    help="default: the bench's (4x the last-level cache)")
    args = ap.parse_args()
    import torch

    first = strata_round(args.bench, 1, args.working_set_bytes)
    n = int(first["params"])
    torch.set_num_threads(int(first["threads"]))
    forms = torch_forms(torch)
    # One parameter tensor for every form (the forms run one after another): memory for one
    # parameter, gradient and pair of moments at a time, beside the bench's own arrays.
    p = torch.full((n,), 0.5, dtype=torch.float32, requires_grad=True)
    p.grad = torch.full((n,), 0.01, dtype=torch.float32)
    rounds = []
    for r in range(args.rounds):
        s = strata_round(args.bench, args.reps, args.working_set_bytes)
        t = torch_round(torch, p, forms, args.reps)
        rounds.append((s, t))
        print(f"# round {r + 1}: strata {float(s['adamw_s']):.4f} s, torch "
              + ", ".join(f"{k} {v:.4f} s" for k, v in t.items() if v is not None),
              file=sys.stderr, flush=True)

    def med(values):
        return statistics.median(values)

    print(f"date={datetime.date.today().isoformat()}")
    print(f"cpu={first['cpu']}\nthreads={first['threads']}\nkernel_path={first['kernel_path']}")
    print(f"torch={torch.__version__}\npython={platform.python_version()}")
    print(f"llc_bytes={first['llc_bytes']} ({first['llc_source']})")
    print(f"params={n}\nworking_set_bytes={first['working_set_bytes']}")
    print(f"rounds={args.rounds}\nreps={args.reps}")
    for key in ("stream_copy_bytes_per_s", "stream_triad_bytes_per_s", "in_place_bytes_per_s",
                "adamw_streams_bytes_per_s", "memory_bytes_per_s"):
        print(f"{key}={med([float(s[key]) for s, _ in rounds]):.4g}")
    for key in ("adamw_s", "adamw_bf16_s"):
        print(f"strata_{key}={med([float(s[key]) for s, _ in rounds]):.5f}")
    for key in ("adamw_bytes_per_s", "adamw_fraction_of_memory_bw", "adamw_bf16_bytes_per_s",
                "adamw_bf16_fraction_of_memory_bw"):
        print(f"strata_{key}={med([float(s[key]) for s, _ in rounds]):.4g}")
    for name in forms:
        got = [t[name] for _, t in rounds if t[name] is not None]
        if not got:
            print(f"torch_{name}_s=unavailable")
            continue
        ratios = [t[name] / float(s["adamw_s"]) for s, t in rounds if t[name] is not None]
        print(f"torch_{name}_s={med(got):.5f}")
        print(f"torch_{name}_bytes_per_s={28 * n / med(got):.4g}")
        print(f"strata_speedup_over_torch_{name}={med(ratios):.2f}")
    print(f"torch_fresh_tensor_s={med([t['fresh_tensor'] for _, t in rounds]):.5f} "
          "(sqrt into a new tensor of the same size: the allocation PyTorch's step repeats)")
    if "fused" not in forms:
        print(f"torch_fused_s=unavailable (AdamW takes no fused= in torch {torch.__version__})")


if __name__ == "__main__":
    main()
