#!/usr/bin/env python3
"""PyTorch reference for strata's GPT-2 training throughput (issue 4).

Trains the same model strata trains (read from a strata model JSON: layers, hidden, heads,
seq_len, vocab, ffn_hidden) on one GPU the way a careful PyTorch user would: pre-LayerNorm
GPT-2 blocks, causal F.scaled_dot_product_attention (flash kernels), learned position
embedding, output head tied to the token embedding, fp32 parameters under
torch.autocast(bfloat16) (or pure bf16 parameters with --param-dtype bf16), fused AdamW,
gradient clipping at 1.0, torch.compile. Prints the median step time, tokens/s, TFLOP/s and
MFU, the last two with exactly strata's FLOP formulas (cost_model/specs/step_report.cc), so that
tools/bench/gpt2_vs_pytorch.py can put both side by side. The loop, the command line and the
result line are shared with tools/bench/pytorch_llama.py (train, main); --device cpu runs on
the CPU, a check of the script itself (pytorch_llama.py's in CI), not a comparison.

Deliberately not here: real data (random byte ids in [0, 256), like strata's byte tokens,
drawn on the GPU so the input pipeline costs nothing), evaluation, checkpointing, multi-GPU,
vocabulary padding to a multiple of 64 (the vocabulary stays strata's 50257 so both train the
same model), activation recomputation, dropout. torch is imported lazily so that --help and
py_compile work on a machine without it.
"""

import argparse
import json
import math
import sys
import time

# Dense bf16 tensor-core peak of an H100 SXM5 (NVIDIA datasheet), the figure
# configs/clusters/h100-x1.json gives strata for its MFU.
DEFAULT_PEAK_TFLOPS = 989.0


class ConfigError(Exception):
    """A model config this script cannot train: main prints it and exits 2."""


def layer_matmul_params(model):
    """A layer's GEMM weights N (strata::layer_matmul_params, cost_model/specs/layer_tensors.cc): Q and
    the output projection h^2 each, K and V kv_heads x head_dim rows of h each, the MLP's input
    matrix (two stacked for SwiGLU: gate and up) and its output matrix f h each. GPT-2:
    4h^2 + 2hf; Llama: 2h^2 + 2 kv d h + 3hf."""
    h, f, heads = model["hidden"], model["ffn_hidden"], model["heads"]
    kv_rows = model.get("kv_heads", heads) * (h // heads)
    mlp_inputs = 2 if model.get("mlp", "gelu") == "swiglu" else 1
    return 2 * h * h + 2 * kv_rows * h + (mlp_inputs + 1) * f * h


def gemm_weight_factor(model):
    """k = N / h^2: 12 for GPT-2 at f = 4h, 14.5 for Llama 3.2 1B."""
    return float(layer_matmul_params(model)) / (float(model["hidden"]) * float(model["hidden"]))


def megatron_model_flops(model, global_batch):
    """Megatron's F per iteration of `global_batch` sequences (Narayanan et al. 2021, eq. 3),
    with GPT's 12 h^2 of GEMM weights a layer replaced by the model's k h^2:
    8k B s l h^2 (1 + 2s/(k h) + 3V/(4 k l h)), at k = 12 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
    Counts the layers four times a forward (with the recomputed forward), whatever the
    recomputation. Same as strata::megatron_model_flops in cost_model/specs/step_report.cc, in the
    same order of operations."""
    B, s = float(global_batch), float(model["seq_len"])
    l, h, V = float(model["layers"]), float(model["hidden"]), float(model["vocab"])
    k = gemm_weight_factor(model)
    return 8.0 * k * B * s * l * h * h * (1.0 + 2.0 * s / (k * h) + 3.0 * V / (4.0 * k * l * h))


def model_flops_without_recompute(model, global_batch):
    """Model FLOPs with no recomputation counted, the numerator of MFU:
    6k B s l h^2 (1 + 2s/(k h) + V/(k l h)), at k = 12 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
    Same as strata::model_flops_without_recompute in cost_model/specs/step_report.cc."""
    B, s = float(global_batch), float(model["seq_len"])
    l, h, V = float(model["layers"]), float(model["hidden"]), float(model["vocab"])
    k = gemm_weight_factor(model)
    return 6.0 * k * B * s * l * h * h * (1.0 + 2.0 * s / (k * h) + V / (k * l * h))


def lower_median(values):
    """The median strata reports (executor/report/run_report.cc median_step): the lower
    middle element of the sorted values, so an even count does not average two steps."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def load_model_spec(path):
    """The strata model config at `path`, checked for what every model here reads; ConfigError
    naming the file, the field, its value and what was expected."""
    try:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: cannot read a model config: {error}") from None
    for key in ("name", "layers", "hidden", "heads", "seq_len", "vocab"):
        if key not in spec:
            raise ConfigError(f"{path}: missing key '{key}'")
    spec.setdefault("ffn_hidden", 4 * spec["hidden"])
    if spec["hidden"] % spec["heads"] != 0:
        raise ConfigError(f"{path}: hidden {spec['hidden']}, expected a multiple of heads {spec['heads']}")
    if spec["vocab"] < 256:
        raise ConfigError(f"{path}: vocab {spec['vocab']}, expected >= 256 (tokens are bytes)")
    return spec


def build_gpt(spec):
    """The GPT-2 module for `spec`; classes are defined here so torch is imported lazily."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    C, n_head, T = spec["hidden"], spec["heads"], spec["seq_len"]
    V, L, ffn = spec["vocab"], spec["layers"], spec["ffn_hidden"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C)
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)
            self.ln2 = nn.LayerNorm(C)
            self.fc = nn.Linear(C, ffn)
            self.fc2 = nn.Linear(ffn, C)

        def forward(self, x):  # x: (B, T, C)
            B, T_, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            # (B, T, C) -> (B, heads, T, C/heads), the layout SDPA's flash kernel takes.
            q, k, v = (t.view(B, T_, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T_, C))
            return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C)
            self.apply(self._init)
            # GPT-2's scaled init of the two projections that write into the residual stream.
            for block in self.blocks:
                nn.init.normal_(block.proj.weight, mean=0.0, std=0.02 / math.sqrt(2 * L))
                nn.init.normal_(block.fc2.weight, mean=0.0, std=0.02 / math.sqrt(2 * L))

        @staticmethod
        def _init(m):
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

        def forward(self, idx, targets):  # idx, targets: (B, T) int64
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.blocks:
                x = block(x)
            # Output head tied to wte, no bias. The loss is inside the module so that
            # torch.compile fuses it with the logits (what a tuned PyTorch run does).
            logits = F.linear(self.ln_f(x), self.wte.weight)  # (B, T, V)
            return F.cross_entropy(logits.view(-1, V).float(), targets.reshape(-1))

    return GPT()


def train(args, spec, build_model):
    """Runs warmup + timed steps of build_model(spec) on args.device; returns the result dict
    (raises torch.OutOfMemoryError)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"

    def synchronize():
        if on_gpu:
            torch.cuda.synchronize()

    model = build_model(spec).to(device)
    pure_bf16 = args.param_dtype == "bf16"
    if pure_bf16:
        model = model.to(torch.bfloat16)
    # The fused kernel is CUDA's (torch 2.0 on); the CPU path takes the default.
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8,
                                  weight_decay=0.1, **({"fused": True} if on_gpu else {}))
    step_model = torch.compile(model) if not args.no_compile else model

    B, K, T = args.micro_batch, args.grad_accum, spec["seq_len"]
    generator = torch.Generator(device=device)
    generator.manual_seed(args.seed)

    def step():
        total = torch.zeros((), device=device, dtype=torch.float32)
        for _ in range(K):
            # A fresh batch per micro-step: T+1 byte ids, inputs and next-token targets.
            tokens = torch.randint(0, 256, (B, T + 1), device=device, generator=generator)
            x, y = tokens[:, :-1], tokens[:, 1:]
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=not pure_bf16):
                loss = step_model(x, y)
            # Mean over all B*K*T tokens of the step, like strata's loss.
            (loss / K).backward()
            total += loss.detach() / K
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return total

    first_loss = None  # of the first step, warmup or timed: from the initial weights
    for i in range(args.warmup):  # untimed: includes torch.compile's tracing and autotuning
        t0 = time.perf_counter()
        loss = step()
        synchronize()
        first_loss = loss.item() if first_loss is None else first_loss
        print(f"warmup {i + 1}/{args.warmup}  loss {loss.item():.4f}  "
              f"{time.perf_counter() - t0:.3f} s", file=sys.stderr, flush=True)

    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for i in range(args.steps):
        synchronize()
        t0 = time.perf_counter()
        loss = step()
        synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss)  # a device tensor: .item() here would sit inside the next step's timing
        print(f"step {i + 1}/{args.steps}  {times[-1]:.4f} s", file=sys.stderr, flush=True)

    step_s = lower_median(times)
    global_batch = B * K
    peak_flops = args.peak_tflops * 1e12
    profiled = {}
    if args.profile_top > 0 and on_gpu:  # after the timing: the profiler slows its step
        totals, busy_ms = profile_kernels(step)
        top = sorted(totals.items(), key=lambda kv: -kv[1][0])[: args.profile_top]
        profiled = {"profiled_gpu_ms": busy_ms,
                    "top_kernels": [{"name": name, "ms": ms, "calls": calls}
                                    for name, (ms, calls) in top]}
    return {
        "framework": "pytorch",
        "model": spec["name"],
        "device": args.device,
        "param_dtype": "bf16" if pure_bf16 else "fp32+autocast-bf16",
        "compiled": not args.no_compile,
        "attention": getattr(model, "attention", "scaled_dot_product_attention"),
        "micro_batch": B,
        "grad_accum": K,
        "seq_len": T,
        "steps": args.steps,
        "step_s": step_s,
        "tokens_per_s": global_batch * T / step_s,
        "tflops": megatron_model_flops(spec, global_batch) / step_s / 1e12,
        # Against a GPU's peak: no figure for a CPU run.
        "mfu": model_flops_without_recompute(spec, global_batch) / step_s / peak_flops if on_gpu else None,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if on_gpu else None,
        "first_loss": losses[0].item() if first_loss is None else first_loss,
        "final_loss": losses[-1].item(),
        "gpu": torch.cuda.get_device_name(device) if on_gpu else None,
        "torch": torch.__version__,
        **profiled,
    }


def is_out_of_memory(error):
    torch = sys.modules.get("torch")
    if torch is None:  # torch itself failed to import: that is no OOM
        return False
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(torch.cuda, "OutOfMemoryError", None)) if t)
    if isinstance(error, oom_types):
        return True
    # Inductor and the caching allocator can surface an OOM wrapped in another RuntimeError.
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()


def parse_args(argv, doc=__doc__):
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="strata model JSON (configs/models/*.json)")
    p.add_argument("--micro-batch", type=int, required=True, help="sequences per micro-step")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-steps per optimizer step")
    p.add_argument("--steps", type=int, default=20, help="timed steps (median reported)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (include compile)")
    p.add_argument("--peak-tflops", type=float, default=DEFAULT_PEAK_TFLOPS,
                   help="device peak for MFU, TFLOP/s (default 989: H100 SXM dense bf16)")
    p.add_argument("--param-dtype", choices=("fp32", "bf16"), default="fp32",
                   help="fp32: fp32 parameters under bf16 autocast (default); bf16: pure bf16")
    p.add_argument("--no-compile", action="store_true", help="eager mode (for debugging)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cuda (default: the comparison) or cpu (a check of the script itself)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--json", action="store_true",
                   help="print the result as one JSON line on stdout (progress goes to stderr)")
    p.add_argument("--profile-top", type=int, default=0, metavar="N",
                   help="after the timed steps, one more under torch.profiler: its N kernels "
                        "with the most GPU time go into the result (top_kernels); 0: none")
    args = p.parse_args(argv)
    for name in ("micro_batch", "grad_accum", "steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: value {getattr(args, name)}, expected >= 1")
    if args.warmup < 0:
        p.error(f"--warmup: value {args.warmup}, expected >= 0")
    if args.peak_tflops <= 0:
        p.error(f"--peak-tflops: value {args.peak_tflops}, expected > 0")
    if args.profile_top < 0:
        p.error(f"--profile-top: value {args.profile_top}, expected >= 0")
    return args


def profile_kernels(step):
    """Runs step() once under torch.profiler; returns ({kernel name: (GPU ms, calls)}, the GPU
    busy ms of the step: the sum over kernels). Kernels carry their own GPU time; the CPU-side
    ops above them carry none of their own, so only kernels are counted."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    totals = {}
    for row in prof.key_averages():
        us = getattr(row, "self_device_time_total", None)
        if us is None:
            us = row.self_cuda_time_total
        if us > 0:
            totals[row.key] = (us / 1e3, row.count)
    return totals, sum(ms for ms, _ in totals.values())


def result_line(result):
    """The one human-readable line of a result (n/a where a CPU run has no figure)."""
    mfu = "n/a" if result["mfu"] is None else f"{100 * result['mfu']:.1f}%"
    peak = "n/a" if result["peak_mem_gib"] is None else f"{result['peak_mem_gib']:.2f} GiB"
    return (f"pytorch {result['model']}: {result['micro_batch']} x {result['grad_accum']} sequences "
            f"of {result['seq_len']}, median step {result['step_s']:.4f} s, "
            f"{result['tokens_per_s']:.0f} tokens/s, {result['tflops']:.1f} TFLOP/s, "
            f"MFU {mfu}, peak {peak}, first loss {result['first_loss']:.4f}, "
            f"final loss {result['final_loss']:.4f}")


def main(argv=None, load_spec=load_model_spec, build_model=build_gpt, doc=__doc__):
    """Trains build_model(load_spec(--model)) and prints the result. Exit codes: 0 a result,
    2 a bad model config, 3 out of memory."""
    args = parse_args(argv, doc)
    try:
        spec = load_spec(args.model)
        result = train(args, spec, build_model)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2
    except Exception as error:  # only an OOM is turned into a result; anything else is a bug
        if not is_out_of_memory(error):
            raise
        result = {"framework": "pytorch", "model": spec["name"], "micro_batch": args.micro_batch,
                  "grad_accum": args.grad_accum, "error": "out of memory"}
        print(f"pytorch {spec['name']}: out of memory: {str(error).splitlines()[0] if str(error) else ''}",
              file=sys.stderr, flush=True)
        if args.json:
            print(json.dumps(result), flush=True)
        return 3
    print(result_line(result), file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.json:
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
