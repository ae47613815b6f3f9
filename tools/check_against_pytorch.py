#!/usr/bin/env python3
"""strata's CPU backend against GPT-2 and a Llama written in plain PyTorch, on the same batches.

For each case (the tiny model on one rank; a GPT-2-shaped model, 12 layers of reduced width
with GPT-2's 50257-token vocabulary, on one rank, on a t2 p2 plan, and on d2 under ZeRO-3 and
under ZeRO-1 with the optimizer on the CPU):
  1. random weights (every tensor, biases and LayerNorm gains included, so a layout mistake
     shows) are written as init.safetensors with Hugging Face GPT-2 names and layouts;
  2. `strata run --init-from init.safetensors --steps 2 --save-weights final.safetensors`
     trains two AdamW steps (warmup, cosine schedule, weight decay on matrices only, global
     norm clipping) and writes metrics.jsonl;
  3. PyTorch loads init.safetensors, computes the loss of batch 0 (strata's step-1 loss), one
     AdamW step with the same hyper-parameters, the loss of batch 1 (strata's step-2 loss),
     a second step; then it loads strata's final.safetensors and compares the loss of batch 2
     under strata's weights and under its own.
Then the tiny Llama (configs/models/tiny-llama.json) on one rank, t2 p2 and d2 under ZeRO-3,
from random weights PyTorch makes and writes as a checkpoint sharded over two files with
Hugging Face Llama names and an index (model.safetensors.index.json), which strata loads
with --init-from: the losses of three steps (check_llama_case). And tiny-llama-scaled (the
same with Llama 3.1's rope_scaling, its three frequency bands all inside the head) on one rank.
Each loss must agree within 1e-5 relative (fp32). The batches are the ones strata samples
(`strata data --print-batches`); the GPT-2-shaped case trains on an llm.c token file written
below in a few lines.

--backend cuda (on a machine with a GPU and a CUDA build of strata): GPT-2 124M from the same
random weights (--init-from) on the same tokens, 20 AdamW steps in bf16, strata's CUDA backend
against PyTorch's bf16 autocast over fp32 weights on the GPU: every step's loss within 1%
relative, and the loss must fall (a check between two flat lines would prove nothing).
--self-test checks the pieces of that path that need no GPU, on the CPU (seconds).

Exit 0 pass, 1 fail, 77 when torch cannot be imported or (cuda) sees no GPU: ctest's
SKIP_RETURN_CODE, except under CI=true, where a missing torch is a failure (exit 1): CI
installs it (tools/install_deps.sh), so its absence there is a broken install, not a skip.
Usage: check_against_pytorch.py --strata build/tools/strata/strata [--work DIR] [--backend cpu|cuda]
       check_against_pytorch.py --self-test
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys

SKIP = 77  # ctest's SKIP_RETURN_CODE for these tests (tests/tools/pytorch.cmake)


def skip_or_fail(reason):
    """Exit 77 (skipped), or 1 under CI=true, where tools/install_deps.sh has installed torch."""
    if os.environ.get("CI") == "true":
        print(f"FAIL: {reason}; CI=true, where tools/install_deps.sh installs python3-torch, so this "
              "check must not skip")
        sys.exit(1)
    print(f"SKIP: {reason}; tools/install_deps.sh installs python3-torch")
    sys.exit(SKIP)


try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    skip_or_fail(f"torch is not importable ({e})")

TOLERANCE = 1e-5
# Biases and LayerNorm parameters after two steps, largest absolute difference. Decay on a
# LayerNorm gain (~1) that should not decay moves it by lr wd = 1e-4 a step, so 1e-5 tells
# the decay rule apart (measured: 2e-4 when strata decays them). Matrices are printed, not
# held to it: an element whose two gradients nearly cancel turns float rounding into up to
# lr of AdamW's ~sign(g) step (measured 1.3e-5 on the GPT-2-shaped model).
WEIGHT_TOLERANCE = 1e-5
TRAIN = {"global_batch": 4, "precision": "fp32", "seed": 7, "steps": 2,
         "optimizer": {"name": "adamw", "lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                       "weight_decay": 0.1, "grad_clip": 1.0, "lr_warmup_steps": 2,
                       "lr_decay_style": "cosine", "lr_decay_steps": 10, "min_lr": 1e-4}}
TINY = {"name": "tiny", "layers": 8, "hidden": 64, "heads": 4, "seq_len": 64, "vocab": 256,
        "ffn_hidden": 256}
GPT2_SHAPED = {"name": "gpt2-12l-narrow", "layers": 12, "hidden": 64, "heads": 4, "seq_len": 32,
               "vocab": 50257, "ffn_hidden": 256}


def plan(t, p, micro_batch, d=1, zero=0, optimizer_tier="none"):
    return {"tp": t, "pp": p, "dp": d, "virtual_stages": 1, "micro_batch": micro_batch,
            "schedule": "1f1b", "zero_stage": zero, "recompute": "none", "sequence_parallel": False,
            "offload": {"optimizer": optimizer_tier, "gradients": "none", "params": "none"}}


def lr_at(opt, t, run_steps):
    """optimizer_schedule.h's learning_rate, for AdamW step t (1-based)."""
    w = opt.get("lr_warmup_steps", 0)
    if w > 0 and t <= w:
        return opt["lr"] * t / w
    style = opt.get("lr_decay_style", "constant")
    if style == "constant":
        return opt["lr"]
    end = opt.get("lr_decay_steps", 0) or run_steps
    if t >= end:
        return opt["min_lr"]
    r = (t - w) / (end - w)
    coeff = 1 - r if style == "linear" else 0.5 * (1 + math.cos(math.pi * r))
    return opt["min_lr"] + (opt["lr"] - opt["min_lr"]) * coeff


def gpt2_shapes(m):
    h, f, v, s = m["hidden"], m["ffn_hidden"], m["vocab"], m["seq_len"]
    shapes = {"wte.weight": (v, h), "wpe.weight": (s, h)}
    for i in range(m["layers"]):
        p = f"h.{i}."
        shapes.update({p + "ln_1.weight": (h,), p + "ln_1.bias": (h,),
                       p + "attn.c_attn.weight": (h, 3 * h), p + "attn.c_attn.bias": (3 * h,),
                       p + "attn.c_proj.weight": (h, h), p + "attn.c_proj.bias": (h,),
                       p + "ln_2.weight": (h,), p + "ln_2.bias": (h,),
                       p + "mlp.c_fc.weight": (h, f), p + "mlp.c_fc.bias": (f,),
                       p + "mlp.c_proj.weight": (f, h), p + "mlp.c_proj.bias": (h,)})
    shapes.update({"ln_f.weight": (h,), "ln_f.bias": (h,)})
    return shapes


def save_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        data = t.detach().contiguous().to(torch.float32).numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        b, end = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(raw[base + b:base + end]), dtype=torch.float32).reshape(e["shape"])
    return out


def random_weights(m, seed):
    g = torch.Generator().manual_seed(seed)
    w = {}
    for name, shape in gpt2_shapes(m).items():
        x = torch.randn(shape, generator=g) * 0.02
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            x = 1.0 + 5 * x  # gains near 1, not all equal
        w[name] = x
    return w


def loss_of(m, w, tokens, fused_attention=False):
    """GPT-2 forward in plain PyTorch: tokens (B, T + 1) -> mean cross-entropy. fused_attention:
    PyTorch's scaled_dot_product_attention (the same function, without the T x T matrices kept
    for the backward; GPT-2 124M at T = 1024 on a GPU) where this torch has it."""
    idx, targets = tokens[:, :-1], tokens[:, 1:]
    B, T = idx.shape
    C, nh = m["hidden"], m["heads"]
    x = w["wte.weight"][idx] + w["wpe.weight"][:T]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=idx.device), diagonal=1)
    for i in range(m["layers"]):
        p = f"h.{i}."
        h = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps=1e-5)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: x W
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (z.view(B, T, nh, C // nh).transpose(1, 2) for z in (q, k, v))
        if fused_attention and hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // nh)
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps=1e-5)
        h = F.gelu(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), w["ln_f.weight"], w["ln_f.bias"], eps=1e-5)
    logits = x @ w["wte.weight"].T  # tied output layer
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def torch_run(m, init, batches):
    """Losses of batches 0 and 1 with one AdamW step between, and the weights after two."""
    opt = TRAIN["optimizer"]
    w = {k: v.clone().requires_grad_(True) for k, v in init.items()}
    decay = [v for v in w.values() if v.dim() == 2]  # matrices and embeddings
    no_decay = [v for v in w.values() if v.dim() < 2]  # biases, LayerNorm gains and biases
    adamw = torch.optim.AdamW([{"params": decay, "weight_decay": opt["weight_decay"]},
                               {"params": no_decay, "weight_decay": 0.0}],
                              lr=opt["lr"], betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"],
                              foreach=False)
    losses = []
    for step in range(2):
        adamw.zero_grad()
        loss = loss_of(m, w, batches[step])
        losses.append(loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(w.values()), opt["grad_clip"])
        for group in adamw.param_groups:
            group["lr"] = lr_at(opt, step + 1, TRAIN["steps"])
        adamw.step()
    return losses, {k: v.detach() for k, v in w.items()}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(" ".join(cmd))
        print(r.stdout[-4000:], r.stderr[-4000:])
        raise SystemExit(f"FAIL: strata exited {r.returncode}")
    return r.stdout


def check_case(strata, work, name, model, plans, data=None):
    os.makedirs(work, exist_ok=True)
    model_path, train_path = os.path.join(work, "model.json"), os.path.join(work, "train.json")
    json.dump(model, open(model_path, "w"))
    json.dump(TRAIN, open(train_path, "w"))
    init = random_weights(model, 11)
    init_path = os.path.join(work, "init.safetensors")
    save_safetensors(init_path, init)
    data_args = ["--data", data] if data else []
    lines = run([strata, "data", "--print-batches", "3", "--model", model_path, "--train", train_path] + data_args)
    batches = [torch.tensor(json.loads(l)["tokens"], dtype=torch.long) for l in lines.splitlines()]
    torch_losses, torch_final = torch_run(model, init, batches)
    with torch.no_grad():
        torch_loss2 = loss_of(model, torch_final, batches[2]).item()
    ok = True
    for label, spec in plans.items():
        out = os.path.join(work, label)
        plan_path = os.path.join(work, label + ".plan.json")
        json.dump(plan(*spec), open(plan_path, "w"))
        final_path = os.path.join(out, "final.safetensors")
        os.makedirs(out, exist_ok=True)
        run([strata, "run", "--plan", plan_path, "--model", model_path, "--train", train_path,
             "--backend", "cpu", "--steps", "2", "--init-from", init_path, "--save-weights",
             final_path, "--out", out] + data_args)
        metrics = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
        strata_losses = [r["loss"] for r in metrics]
        strata_final = load_safetensors(final_path)
        with torch.no_grad():
            strata_loss2 = loss_of(model, strata_final, batches[2]).item()
        worst = {1: (0.0, ""), 2: (0.0, "")}
        for k, v in torch_final.items():
            d = (strata_final[k] - v).abs().max().item()
            if d > worst[v.dim()][0]:
                worst[v.dim()] = (d, k)
        verdict = "ok" if worst[1][0] <= WEIGHT_TOLERANCE else "FAIL"
        ok = ok and worst[1][0] <= WEIGHT_TOLERANCE
        print(f"{name} {label}: weights after two steps, largest difference: biases and norms "
              f"{worst[1][0]:.2e} ({worst[1][1]}) {verdict}; matrices {worst[2][0]:.2e} ({worst[2][1]})")
        rows = [("loss, batch 0", strata_losses[0], torch_losses[0]),
                ("loss after one AdamW step, batch 1", strata_losses[1], torch_losses[1]),
                ("strata's saved weights after two steps, batch 2", strata_loss2, torch_loss2)]
        for what, s, t_ in rows:
            rel = abs(s - t_) / abs(t_)
            verdict = "ok" if rel <= TOLERANCE else "FAIL"
            ok = ok and rel <= TOLERANCE
            print(f"{name} {label}: {what}: strata {s:.7f} pytorch {t_:.7f} relative error {rel:.2e} {verdict}")
    return ok


# The Llama family: the bundled tiny-llama (RMSNorm, SwiGLU, RoPE, 2 KV heads of 4, untied
# output, no biases). PyTorch makes random weights (every tensor, norm gains included, so a
# layout mistake shows) and writes them with transformers' LlamaForCausalLM names, sharded
# over two files with an index, as transformers saves a large model; strata loads them with
# --init-from. Three losses are compared, the third after two AdamW steps (the first step is
# ~sign(g) for any gradient size; the second step's m/sqrt(v) depends on the gradients'
# magnitudes). Written with plain Python: neither safetensors nor transformers is needed.
LLAMA_STEPS = 3
LLAMA_SHARDS = 2


def llama_hf_names(m):
    """strata's tensor (llama_loss_of's key) -> the Hugging Face tensors stacked in its rows, in
    order (executor/weights/llama_tensors.h): K then V in kv_w, gate then up in fc_w."""
    names = {"wte": ["model.embed_tokens.weight"], "lnf_w": ["model.norm.weight"],
             "lm_head": ["lm_head.weight"]}
    for i in range(m["layers"]):
        p = f"model.layers.{i}."
        names.update({f"{i}.ln1_w": [p + "input_layernorm.weight"],
                      f"{i}.q_w": [p + "self_attn.q_proj.weight"],
                      f"{i}.kv_w": [p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"],
                      f"{i}.proj_w": [p + "self_attn.o_proj.weight"],
                      f"{i}.ln2_w": [p + "post_attention_layernorm.weight"],
                      f"{i}.fc_w": [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"],
                      f"{i}.fc2_w": [p + "mlp.down_proj.weight"]})
    return names


def llama_random_weights(m, seed):
    """Random weights for llama_loss_of: matrices normal(0, 0.02), norm gains near 1."""
    h, f, nh = m["hidden"], m["ffn_hidden"], m["heads"]
    kv_rows = m.get("kv_heads", nh) * (h // nh)
    g = torch.Generator().manual_seed(seed)
    shapes = {"wte": (m["vocab"], h), "lnf_w": (h,), "lm_head": (m["vocab"], h)}
    for i in range(m["layers"]):
        shapes.update({f"{i}.ln1_w": (h,), f"{i}.q_w": (h, h), f"{i}.kv_w": (2 * kv_rows, h),
                       f"{i}.proj_w": (h, h), f"{i}.ln2_w": (h,), f"{i}.fc_w": (2 * f, h),
                       f"{i}.fc2_w": (h, f)})
    w = {}
    for name, shape in shapes.items():
        x = torch.randn(shape, generator=g) * 0.02
        w[name] = 1.0 + 5 * x if len(shape) == 1 else x  # gains near 1, not all equal
    return w


def save_llama_checkpoint(directory, m, w):
    """w as a Hugging Face Llama checkpoint: LLAMA_SHARDS safetensors files (tensors dealt
    round-robin) and model.safetensors.index.json's weight_map; returns the directory."""
    os.makedirs(directory, exist_ok=True)
    hf = {}
    for key, names in llama_hf_names(m).items():
        for name, part in zip(names, w[key].chunk(len(names), dim=0)):
            hf[name] = part
    shard_name = lambda s: f"model-{s + 1:05d}-of-{LLAMA_SHARDS:05d}.safetensors"  # noqa: E731
    shards, weight_map = [{} for _ in range(LLAMA_SHARDS)], {}
    for i, (name, t) in enumerate(sorted(hf.items())):
        shards[i % LLAMA_SHARDS][name] = t
        weight_map[name] = shard_name(i % LLAMA_SHARDS)
    for s, tensors in enumerate(shards):
        save_safetensors(os.path.join(directory, shard_name(s)), tensors)
    total = sum(t.numel() * 4 for t in hf.values())
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(directory, "model.safetensors.index.json"), "w"))
    return directory


def rope_inverse_frequencies(m, hs):
    """inv_i, i < HS/2, in double (kernels/rope_frequency.h): theta^(-2i/HS), and with the
    model's rope_scaling, Llama 3.1's "llama3" rule as transformers' _compute_llama3_parameters
    writes it: wavelengths under original/high kept, over original/low divided by factor,
    blended linearly in 1/wavelength between."""
    i = torch.arange(hs // 2, dtype=torch.float64)
    inv = m["rope_theta"] ** (-2.0 * i / hs)
    s = m.get("rope_scaling")
    if s is None or s["factor"] == 1.0:
        return inv
    orig, low, high, factor = (s["original_max_position_embeddings"], s["low_freq_factor"],
                               s["high_freq_factor"], s["factor"])
    wavelen = 2 * math.pi / inv
    smooth = (orig / wavelen - low) / (high - low)
    blended = (1 - smooth) * inv / factor + smooth * inv
    return torch.where(wavelen < orig / high, inv,
                       torch.where(wavelen > orig / low, inv / factor, blended))


def rope_cos_sin(m, T, hs):
    """cos and sin of the angles pos inv_i, (T, HS/2): computed in double, as strata computes
    every RoPE angle (kernels/cpu/rope.h), then rounded to fp32."""
    inv = rope_inverse_frequencies(m, hs)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    return angle.cos().float(), angle.sin().float()


def apply_rope(x, cos, sin):
    """Rotary embedding with rotate_half pairs (i, i + HS/2); x: (B, heads, T, HS), cos and
    sin: rope_cos_sin's (T, HS/2). The result keeps x's dtype (under autocast, bf16 x times
    fp32 cos would otherwise turn q and k to fp32 beside a bf16 v)."""
    hs = x.shape[-1]
    a, b = x[..., :hs // 2], x[..., hs // 2:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).to(x.dtype)


def rms_norm(x, gain, eps):
    """RMSNorm as Llama writes it (Zhang and Sennrich 2019): x / sqrt(mean(x^2) + eps) * gain."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain


def sdpa_takes_gqa():
    """Whether F.scaled_dot_product_attention reads grouped K and V itself (enable_gqa, torch 2.5)."""
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    return hasattr(F, "scaled_dot_product_attention") and (major, minor) >= (2, 5)


def grouped_causal_attention(q, k, v, fused=False):
    """Causal attention, q: (B, heads, T, HS), k and v: (B, kv_heads, T, HS); query head j reads
    KV head j // (heads / kv_heads). fused: F.scaled_dot_product_attention, torch 2.0 on (with
    enable_gqa where this torch has it, else on K and V repeated per group); else the T x T
    matrices in plain operations, which any torch has. enable_gqa runs on the flash backend,
    which takes bf16 and fp16 only: fp32 inputs fall back to the slow math one."""
    group = q.shape[1] // k.shape[1]
    if fused and sdpa_takes_gqa():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=group > 1)
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    if fused:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[2]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=q.device), diagonal=1)
    att = ((q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])).masked_fill(mask, float("-inf"))
    return att.softmax(dim=-1) @ v


def llama_loss_of(m, w, tokens):
    """A Llama-family decoder in plain PyTorch (weights (out, in), as strata keeps them)."""
    idx, targets = tokens[:, :-1], tokens[:, 1:]
    B, T = idx.shape
    C, nh, eps = m["hidden"], m["heads"], m.get("norm_epsilon", 1e-5)
    kvh, hs, f = m.get("kv_heads", nh), C // nh, m["ffn_hidden"]
    cos, sin = rope_cos_sin(m, T, hs)
    x = w["wte"][idx]
    for i in range(m["layers"]):
        h = rms_norm(x, w[f"{i}.ln1_w"], eps)
        q = (h @ w[f"{i}.q_w"].T).view(B, T, nh, hs).transpose(1, 2)
        k, v = (h @ w[f"{i}.kv_w"].T).split(kvh * hs, dim=2)
        k, v = (z.view(B, T, kvh, hs).transpose(1, 2) for z in (k, v))
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = grouped_causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w[f"{i}.proj_w"].T
        gate, up = (rms_norm(x, w[f"{i}.ln2_w"], eps) @ w[f"{i}.fc_w"].T).split(f, dim=2)
        x = x + (F.silu(gate) * up) @ w[f"{i}.fc2_w"].T
    logits = rms_norm(x, w["lnf_w"], eps) @ w["lm_head"].T  # untied output layer
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def llama_torch_losses(m, init, batches, train):
    """The losses of batches 0 .. LLAMA_STEPS-1 with an AdamW step after each (torch_run's)."""
    opt = train["optimizer"]
    w = {k: v.clone().requires_grad_(True) for k, v in init.items()}
    adamw = torch.optim.AdamW([{"params": [v for v in w.values() if v.dim() == 2],
                                "weight_decay": opt["weight_decay"]},
                               {"params": [v for v in w.values() if v.dim() < 2], "weight_decay": 0.0}],
                              lr=opt["lr"], betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"],
                              foreach=False)
    losses = []
    for step in range(LLAMA_STEPS):
        adamw.zero_grad()
        loss = llama_loss_of(m, w, batches[step])
        losses.append(loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(w.values()), opt["grad_clip"])
        for group in adamw.param_groups:
            group["lr"] = lr_at(opt, step + 1, train["steps"])
        adamw.step()
    return losses


def check_llama_case(strata, work, name, model_path, plans, tolerance=TOLERANCE):
    os.makedirs(work, exist_ok=True)
    model = json.load(open(model_path))
    train = dict(TRAIN, steps=LLAMA_STEPS)
    train_path = os.path.join(work, "train.json")
    json.dump(train, open(train_path, "w"))
    lines = run([strata, "data", "--print-batches", str(LLAMA_STEPS), "--model", model_path,
                 "--train", train_path])
    batches = [torch.tensor(json.loads(l)["tokens"], dtype=torch.long) for l in lines.splitlines()]
    init = llama_random_weights(model, 13)
    checkpoint = save_llama_checkpoint(os.path.join(work, "init"), model, init)
    torch_losses = llama_torch_losses(model, init, batches, train)
    ok = True
    for label, spec in plans.items():
        out = os.path.join(work, label)
        plan_path = os.path.join(work, label + ".plan.json")
        json.dump(plan(*spec), open(plan_path, "w"))
        os.makedirs(out, exist_ok=True)
        run([strata, "run", "--plan", plan_path, "--model", model_path, "--train", train_path,
             "--backend", "cpu", "--steps", str(LLAMA_STEPS), "--init-from", checkpoint, "--out", out])
        strata_losses = [json.loads(l)["loss"] for l in open(os.path.join(out, "metrics.jsonl"))]
        for step, (s_, t_) in enumerate(zip(strata_losses, torch_losses)):
            rel = abs(s_ - t_) / abs(t_)
            verdict = "ok" if rel <= tolerance else "FAIL"
            ok = ok and rel <= tolerance
            print(f"{name} {label}: loss of batch {step} after {step} AdamW steps: strata {s_:.7f} "
                  f"pytorch {t_:.7f} relative error {rel:.2e} {verdict}")
        if len(strata_losses) != LLAMA_STEPS:
            print(f"{name} {label}: {len(strata_losses)} losses, expected {LLAMA_STEPS} FAIL")
            ok = False
    return ok


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata", help="the strata binary (not needed with --self-test)")
    ap.add_argument("--work", default="pytorch_check")
    ap.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--self-test", action="store_true",
                    help="check the CUDA path's pieces on the CPU (no GPU, no strata)")
    a = ap.parse_args(argv)
    if not a.self_test and not a.strata:
        ap.error("--strata is required (except with --self-test)")
    return a


def main():
    a = parse_args(sys.argv[1:])
    if a.self_test:
        import pytorch_cuda_parity
        return pytorch_cuda_parity.self_test()
    if a.backend == "cuda":
        import pytorch_cuda_parity
        return pytorch_cuda_parity.check(a.strata, os.path.abspath(a.work))
    torch.manual_seed(0)
    torch.set_num_threads(1)
    work = os.path.abspath(a.work)
    # The GPT-2-shaped model trains on an llm.c token file (GPT-2 form: uint16) made here.
    os.makedirs(work, exist_ok=True)
    tokens = torch.randint(0, GPT2_SHAPED["vocab"], (20000,), generator=torch.Generator().manual_seed(3))
    llmc = os.path.join(work, "tokens.bin")
    with open(llmc, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(tokens.to(torch.int32).numpy().astype("<u2").tobytes())
    ok = check_case(a.strata, os.path.join(work, "tiny"), "tiny", TINY, {"single": (1, 1, 4)})
    ok = check_case(a.strata, os.path.join(work, "gpt2"), "gpt2-12l", GPT2_SHAPED,
                    {"single": (1, 1, 4), "t2p2": (2, 2, 2),
                     # Weight decay on a ZeRO shard's runs of matrices, and in the CPU optimizer.
                     "d2-zero3": (1, 1, 2, 2, 3), "d2-zero1-cpu-adam": (1, 1, 2, 2, 1, "cpu")},
                    data=llmc) and ok
    llama = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "models",
                         "tiny-llama.json")
    ok = check_llama_case(a.strata, os.path.join(work, "llama"), "tiny-llama", llama,
                          {"single": (1, 1, 4), "t2p2": (2, 2, 2), "d2-zero3": (1, 1, 2, 2, 3)}) and ok
    # Llama 3.1's rope_scaling: one rank is enough, the scaling touches the rotation alone.
    # From 0.02-scale weights RoPE moves the loss little: the scaled and unscaled models'
    # first losses differ by 3.3e-6 relative, under TOLERANCE, so this case holds strata to
    # 1e-6 (the Llama cases agree to ~1e-7), or a strata ignoring the scaling would pass.
    scaled = os.path.join(os.path.dirname(llama), "tiny-llama-scaled.json")
    ok = check_llama_case(a.strata, os.path.join(work, "llama-scaled"), "tiny-llama-scaled",
                          scaled, {"single": (1, 1, 4)}, tolerance=1e-6) and ok
    print("PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
