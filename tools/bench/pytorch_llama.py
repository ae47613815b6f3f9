#!/usr/bin/env python3
"""PyTorch reference for strata's Llama training throughput (issue 26).

Trains the model strata trains from a strata Llama-family config (configs/models/llama*.json,
tiny-llama.json: layers, hidden, heads, kv_heads, seq_len, vocab, ffn_hidden, norm_epsilon,
rope_theta, rope_scaling, tied_output) the way a careful PyTorch user would, in plain PyTorch
(no transformers): pre-RMSNorm blocks; Q, K and V in one matrix, kv_heads key/value heads
each read by a group of query heads through causal F.scaled_dot_product_attention
(enable_gqa where this torch has it); rotary positions, with Llama 3.1's rope_scaling when the
config has one; a SwiGLU MLP (gate and up in one matrix); no biases; the output layer tied to
the embedding or not, as the config says; every matrix normal(0, 0.02) and norm gains 1
(transformers' Llama init); fp32 parameters under torch.autocast(bfloat16) (or pure bf16 with
--param-dtype bf16), fused AdamW, clipping at 1.0, torch.compile.

The RoPE frequencies (kernels/rope_frequency.h's rule), RMSNorm, the rotation and the grouped
attention are tools/check_against_pytorch.py's, the ones its loss check holds strata to; the
training loop, command line, FLOP formulas (k h^2 GEMM weights a layer: k = 14.5 for Llama 3.2
1B) and result line are tools/bench/pytorch_gpt2.py's. Prints the median step time, tokens/s,
TFLOP/s and MFU; --json adds one JSON line on stdout, whose "attention" says which attention
ran.

--device cpu runs it on the CPU (with --no-compile, the attention in plain operations where
this torch has no scaled_dot_product_attention): CI's check of the script
(tests/tools/pytorch_llama_cpu_test.py), not a comparison. On the GPU it refuses a torch
without scaled_dot_product_attention or (unless --no-compile) torch.compile: a slower PyTorch
would flatter strata.

Deliberately not here: real data (random byte ids in [0, 256), like strata's byte tokens),
evaluation, checkpointing, multi-GPU, recomputation, dropout, loading weights
(tools/check_against_pytorch.py does that for the loss check). Exit codes: 0 a result; 2 a bad
argument or model config, or a torch without what the run needs; 3 out of memory; 77 torch not
importable (1 under CI=true: the rule of every PyTorch check, check_against_pytorch.py's).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pytorch_gpt2  # noqa: E402  (the loop, command line and FLOP formulas: not a copy)

# strata's defaults for the family keys a config may leave out (cost_model/specs/model_spec.cc:
# read_family; model_spec.h): GPT-2's choices, which load_llama_spec refuses, RoFormer's theta,
# GPT's epsilon, an output layer tied to the embedding.
STRATA_DEFAULTS = {"norm": "layernorm", "mlp": "gelu", "position": "learned", "biases": True,
                   "rope_theta": 10000.0, "norm_epsilon": 1e-5, "tied_output": True}


def load_llama_spec(path):
    """pytorch_gpt2's checked config, and the family's choices this model implements: RMSNorm,
    SwiGLU, RoPE, no biases, kv_heads dividing heads. ConfigError naming file, field, value and
    what was expected."""
    spec = pytorch_gpt2.load_model_spec(path)
    for key, value in STRATA_DEFAULTS.items():
        spec.setdefault(key, value)
    for field, expected in (("norm", "rmsnorm"), ("mlp", "swiglu"), ("position", "rope"),
                            ("biases", False)):
        if spec.get(field) != expected:
            raise pytorch_gpt2.ConfigError(
                f"{path}: {field} {spec.get(field)!r}, expected {expected!r} (a Llama-family "
                "model; GPT-2 is tools/bench/pytorch_gpt2.py's)")
    kv_heads = spec.setdefault("kv_heads", spec["heads"])
    if kv_heads < 1 or spec["heads"] % kv_heads != 0:
        raise pytorch_gpt2.ConfigError(
            f"{path}: kv_heads {kv_heads}, expected a divisor of heads {spec['heads']}")
    if (spec["hidden"] // spec["heads"]) % 2 != 0:
        raise pytorch_gpt2.ConfigError(
            f"{path}: hidden / heads = {spec['hidden'] // spec['heads']}, expected an even head "
            "size (rotary pairs)")
    return spec


def build_llama(spec):
    """The Llama module for `spec` (load_llama_spec's); classes are defined here so torch is
    imported lazily."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    import check_against_pytorch as blocks

    C, n_head, T = spec["hidden"], spec["heads"], spec["seq_len"]
    V, L, ffn, eps = spec["vocab"], spec["layers"], spec["ffn_hidden"], spec["norm_epsilon"]
    kv_head, hs = spec["kv_heads"], spec["hidden"] // spec["heads"]
    fused = hasattr(F, "scaled_dot_product_attention")

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.Parameter(torch.ones(C))
            self.qkv = nn.Linear(C, C + 2 * kv_head * hs, bias=False)
            self.proj = nn.Linear(C, C, bias=False)
            self.ln2 = nn.Parameter(torch.ones(C))
            self.gate_up = nn.Linear(C, 2 * ffn, bias=False)
            self.down = nn.Linear(ffn, C, bias=False)

        def forward(self, x, cos, sin):  # x: (B, T, C)
            B, T_, _ = x.shape
            q, k, v = self.qkv(blocks.rms_norm(x, self.ln1, eps)).split(
                [C, kv_head * hs, kv_head * hs], dim=2)
            # (B, T, heads x HS) -> (B, heads, T, HS), the layout SDPA takes.
            q = q.view(B, T_, n_head, hs).transpose(1, 2)
            k, v = (t.view(B, T_, kv_head, hs).transpose(1, 2) for t in (k, v))
            q, k = blocks.apply_rope(q, cos, sin), blocks.apply_rope(k, cos, sin)
            y = blocks.grouped_causal_attention(q, k, v, fused=fused)
            x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T_, C))
            gate, up = self.gate_up(blocks.rms_norm(x, self.ln2, eps)).split(ffn, dim=2)
            return x + self.down(F.silu(gate) * up)

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.Parameter(torch.ones(C))
            self.lm_head = None if spec["tied_output"] else nn.Linear(C, V, bias=False)
            # The angles once, in double, as strata computes them (not per step).
            cos, sin = blocks.rope_cos_sin(spec, T, hs)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets):  # idx, targets: (B, T) int64
            T_ = idx.shape[1]
            cos, sin = self.cos[:T_], self.sin[:T_]
            x = self.wte(idx)
            for block in self.blocks:
                x = block(x, cos, sin)
            out = self.wte.weight if self.lm_head is None else self.lm_head.weight
            # The loss inside the module, so that torch.compile fuses it with the logits.
            logits = F.linear(blocks.rms_norm(x, self.ln_f, eps), out)  # (B, T, V)
            return F.cross_entropy(logits.view(-1, V).float(), targets.reshape(-1))

    model = Llama()
    if not fused:
        model.attention = "plain operations (T x T)"
    elif blocks.sdpa_takes_gqa():
        model.attention = "scaled_dot_product_attention, enable_gqa"
    else:
        model.attention = "scaled_dot_product_attention, K and V repeated per group"
    return model


def missing_for_device(args):
    """What this torch lacks for the run asked for, or None (torch imported)."""
    import torch
    import torch.nn.functional as F

    if args.device == "cuda" and not hasattr(F, "scaled_dot_product_attention"):
        return (f"torch {torch.__version__} has no scaled_dot_product_attention (torch 2.0 on): "
                "on the GPU its flash kernels are the comparison")
    if not args.no_compile and not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile (torch 2.0 on); --no-compile runs eagerly"
    return None


def main(argv=None):
    args = pytorch_gpt2.parse_args(argv, __doc__)  # --help and bad arguments need no torch
    # Its import exits 77, or 1 under CI=true, when torch cannot be imported.
    import check_against_pytorch  # noqa: F401
    missing = missing_for_device(args)
    if missing:
        print(f"error: {missing}", file=sys.stderr, flush=True)
        return 2
    return pytorch_gpt2.main(argv, load_spec=load_llama_spec, build_model=build_llama, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main())
