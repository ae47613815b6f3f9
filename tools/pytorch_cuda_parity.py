"""check_against_pytorch.py --backend cuda: strata's CUDA backend against PyTorch's bf16 autocast.

GPT-2 124M (configs/models/gpt2-124m.json) from the same random weights (`--init-from`), on
the same batches (`strata data --print-batches`) of a learnable llm.c token file written here,
20 AdamW steps (warmup, cosine decay, weight decay on matrices, clipping) at micro-batch 8:
  strata:  `strata run --backend cuda` (bf16 compute, fp32 master weights and gradients);
  PyTorch: the plain GPT-2 of check_against_pytorch.py, fp32 weights under
           torch.autocast(bfloat16) on the GPU, fp32 gradients, torch.optim.AdamW.
Every step's loss within LOSS_BOUND relative, and PyTorch's loss must fall by MIN_DROP over the
run. self_test() checks what of this needs no GPU on the CPU: the arguments, the strata command
and its files, the token file, the loss comparison, and the autocast trainer on a tiny shape.
Deliberately not here: the CPU backend's check (check_against_pytorch.py).
"""
import contextlib
import io
import json
import os
import struct
import tempfile

import torch

import check_against_pytorch as base
import loss_comparison

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# bf16 carries 8 significant bits (relative rounding 2^-9 = 0.2%); two implementations that
# round in different places drift apart over steps, and issue 25 asks for 1% over 20 steps.
LOSS_BOUND = 0.01
# From ln(50257) = 10.8 the model learns at least the token file's 1024-token alphabet
# (ln 1024 = 6.9) within 20 steps; 5% is a fall no broken backward or optimizer makes.
MIN_DROP = 0.05
STEPS = 20
MICRO_BATCH = 8
TRAIN = {"global_batch": MICRO_BATCH, "precision": "bf16", "seed": 7, "steps": STEPS,
         "optimizer": {"name": "adamw", "lr": 6e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                       "weight_decay": 0.1, "grad_clip": 1.0, "lr_warmup_steps": 5,
                       "lr_decay_style": "cosine", "lr_decay_steps": STEPS, "min_lr": 6e-5}}


def learnable_tokens(n, vocab, seed, alphabet=1024, noise=0.1):
    """n token ids of a first-order chain over `alphabet` ids spread across the vocabulary: each
    token follows its predecessor by a fixed random map, or (probability `noise`) is drawn
    uniformly from the alphabet. A model can learn it, so the losses move."""
    alphabet = min(alphabet, vocab)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randperm(vocab, generator=g)[:alphabet]
    successor = torch.randperm(alphabet, generator=g)
    random_pick = torch.randint(0, alphabet, (n,), generator=g)
    use_random = torch.rand(n, generator=g) < noise
    out = torch.empty(n, dtype=torch.long)
    state = 0
    for i in range(n):
        state = int(random_pick[i]) if use_random[i] else int(successor[state])
        out[i] = state
    return ids[out]


def write_llmc(path, tokens):
    """An llm.c token file, GPT-2 form (uint16)."""
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(tokens.to(torch.int32).numpy().astype("<u2").tobytes())


def strata_run_command(strata, paths):
    """The `strata run` of the CUDA side; paths: plan, model, train, init, data, out."""
    return [strata, "run", "--backend", "cuda", "--cluster", "h100-x1",
            "--plan", paths["plan"], "--model", paths["model"], "--train", paths["train"],
            "--steps", str(STEPS), "--init-from", paths["init"], "--data", paths["data"],
            "--out", paths["out"]]


def write_inputs(work, model):
    """The model, train and plan files, the token file and the initial weights, in work."""
    os.makedirs(work, exist_ok=True)
    paths = {k: os.path.join(work, f) for k, f in
             (("model", "model.json"), ("train", "train.json"), ("plan", "plan.json"),
              ("init", "init.safetensors"), ("data", "tokens.bin"), ("out", "strata"))}
    json.dump(model, open(paths["model"], "w"))
    json.dump(TRAIN, open(paths["train"], "w"))
    json.dump(base.plan(1, 1, MICRO_BATCH), open(paths["plan"], "w"))
    tokens_needed = STEPS * MICRO_BATCH * (model["seq_len"] + 1) * 2
    write_llmc(paths["data"], learnable_tokens(tokens_needed, model["vocab"], seed=3))
    init = base.random_weights(model, 11)
    base.save_safetensors(paths["init"], init)
    return paths, init


def torch_train(m, init, batches, device, bf16=True):
    """PyTorch's losses of STEPS AdamW steps: fp32 weights on `device`, forward and backward
    under bf16 autocast (bf16=False: in fp32, the self-test's reference), the optimizer of
    check_against_pytorch.py with TRAIN's schedule."""
    opt = TRAIN["optimizer"]
    w = {k: v.to(device).clone().requires_grad_(True) for k, v in init.items()}
    adamw = torch.optim.AdamW(
        [{"params": [v for v in w.values() if v.dim() == 2], "weight_decay": opt["weight_decay"]},
         {"params": [v for v in w.values() if v.dim() < 2], "weight_decay": 0.0}],
        lr=opt["lr"], betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"])
    losses = []
    for step, batch in enumerate(batches[:STEPS]):
        adamw.zero_grad()
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
            loss = base.loss_of(m, w, batch.to(device), fused_attention=True)
        losses.append(loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(w.values()), opt["grad_clip"])
        for group in adamw.param_groups:
            group["lr"] = base.lr_at(opt, step + 1, STEPS)
        adamw.step()
    return losses


def compare_losses(strata_losses, torch_losses, bound=LOSS_BOUND):
    """(ok, lines) of tools/loss_comparison.py with this check's bound and MIN_DROP."""
    return loss_comparison.compare_losses(strata_losses, torch_losses, bound, MIN_DROP)


def check(strata, work):
    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        return base.SKIP
    model = json.load(open(os.path.join(ROOT, "configs", "models", "gpt2-124m.json")))
    paths, init = write_inputs(work, model)
    lines = base.run([strata, "data", "--print-batches", str(STEPS), "--model", paths["model"],
                      "--train", paths["train"], "--data", paths["data"]])
    batches = [torch.tensor(json.loads(l)["tokens"], dtype=torch.long) for l in lines.splitlines()]
    base.run(strata_run_command(strata, paths))
    with open(os.path.join(paths["out"], "metrics.jsonl")) as f:
        strata_losses = [json.loads(l)["loss"] for l in f]
    torch.manual_seed(0)
    torch_losses = torch_train(model, init, batches, "cuda")
    ok, report = compare_losses(strata_losses, torch_losses)
    print("\n".join(report))
    print("PASSED" if ok else "FAILED")
    return 0 if ok else 1


def self_test():
    """What of the CUDA path needs no GPU, on the CPU. Each check names what it guards."""
    failures = []

    def expect(cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            failures.append(what)

    a = base.parse_args(["--backend", "cuda", "--strata", "s"])
    expect(a.backend == "cuda" and a.strata == "s" and not a.self_test, "--backend cuda parses")
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse's usage message
            base.parse_args(["--backend", "rocm", "--strata", "s"])
        expect(False, "an unknown backend is refused")
    except SystemExit as e:
        expect(e.code == 2, "an unknown backend is refused with exit code 2")

    tiny = dict(base.TINY, layers=2, seq_len=16)
    with tempfile.TemporaryDirectory() as work:
        paths, init = write_inputs(work, tiny)
        cmd = strata_run_command("strata", paths)
        expect(cmd[cmd.index("--backend") + 1] == "cuda" and cmd[cmd.index("--init-from") + 1] == paths["init"]
               and cmd[cmd.index("--steps") + 1] == str(STEPS), "the strata command runs CUDA from init.safetensors")
        train = json.load(open(paths["train"]))
        expect(train["precision"] == "bf16" and train["global_batch"] == MICRO_BATCH, "the train file asks for bf16")
        loaded = base.load_safetensors(paths["init"])
        expect(all(torch.equal(loaded[k], init[k]) for k in init), "init.safetensors holds the weights PyTorch starts from")
        with open(paths["data"], "rb") as f:
            magic, version, count = struct.unpack("<3i", f.read(12))
        expected = STEPS * MICRO_BATCH * (tiny["seq_len"] + 1) * 2
        expect((magic, version, count) == (20240520, 1, expected)
               and os.path.getsize(paths["data"]) == 1024 + 2 * expected, "the token file is llm.c's GPT-2 form")

    t1, t2 = learnable_tokens(5000, 50257, 3), learnable_tokens(5000, 50257, 3)
    expect(torch.equal(t1, t2) and int(t1.max()) < 50257 and len(set(t1.tolist())) <= 1024,
           "the token stream is deterministic, in the vocabulary, over a 1024-token alphabet")

    expect(loss_comparison.self_test() == 0, "the loss comparison (tools/loss_comparison.py)")

    # The autocast trainer on the CPU at a tiny shape: bf16 really rounds (the losses differ
    # from fp32's), stays within the bound of the fp32 run, and learns the token stream.
    torch.set_num_threads(1)
    m = dict(base.TINY, layers=2, seq_len=32, vocab=256)
    w = base.random_weights(m, 11)
    stream = learnable_tokens(STEPS * 4 * (m["seq_len"] + 1), m["vocab"], 5, alphabet=64)
    batches = list(stream.view(STEPS, 4, m["seq_len"] + 1))
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        dtype = (w["wte.weight"] @ w["wte.weight"].T).dtype
    expect(dtype == torch.bfloat16, "a matmul under CPU autocast is bf16")
    bf16 = torch_train(m, w, batches, "cpu")
    fp32 = torch_train(m, w, batches, "cpu", bf16=False)
    ok, report = compare_losses(bf16, fp32)
    print("     " + report[-1])
    expect(bf16 != fp32, "bf16 autocast rounds (its losses are not fp32's)")
    expect(ok, "bf16 autocast within 1% of fp32 over 20 steps, the loss falling")
    print("PASSED" if not failures else f"FAILED: {len(failures)} check(s)")
    return 0 if not failures else 1

