#!/usr/bin/env python3
"""Where the PyTorch reference spends one training step on the GPU, kernel by kernel (issue 4).

Builds the model of tools/bench/pytorch_gpt2.py (same module, torch.compile, bf16 autocast,
fused AdamW), runs warm-up steps, then records one step with torch.profiler and prints the
kernels grouped by name with their total GPU time, call count and share of the step, largest
first. Put beside strata_gpt_ops_bench's per-op table, it shows which of strata's ops lose to
PyTorch's and by how much.

Usage (repository root, on a GPU machine):
    python3 tools/bench/pytorch_kernel_profile.py --model configs/models/gpt2-124m.json \
        --micro-batch 16 --grad-accum 4 [--top 40]

Deliberately not here: timing the step (pytorch_gpt2.py does that without profiler overhead).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pytorch_gpt2  # noqa: E402  (the same model, not a copy)


def short_name(name, width=90):
    return name if len(name) <= width else name[: width - 3] + "..."


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--micro-batch", type=int, required=True)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args(argv)

    import torch

    spec = pytorch_gpt2.load_model_spec(args.model)
    device = torch.device("cuda")
    model = pytorch_gpt2.build_gpt(spec).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8,
                                  weight_decay=0.1, fused=True)
    compiled = torch.compile(model)
    B, K, T = args.micro_batch, args.grad_accum, spec["seq_len"]

    def step():
        for _ in range(K):
            tokens = torch.randint(0, 256, (B, T + 1), device=device)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = compiled(tokens[:, :-1], tokens[:, 1:])
            (loss / K).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    totals, step_ms = pytorch_gpt2.profile_kernels(step)
    print(f"{spec['name']}: {B} x {K} sequences of {T}; GPU busy {step_ms:.2f} ms in one step")
    print(f"{'total ms':>9} {'calls':>6} {'share':>6}  kernel")
    for name, (ms, calls) in sorted(totals.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"{ms:9.3f} {calls:6d} {100 * ms / step_ms:5.1f}%  {short_name(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
