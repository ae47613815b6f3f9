#!/usr/bin/env python3
"""Mutation fuzzing of every config kind through the `strata` CLI.

Each mutant is a bundled config (model, train, cluster, plan, workload) or a base profile
with one to three mutations: a value replaced by an interesting one (0, -1, 2^62, 2^63, 1e308,
a literal 1e999 or NaN, a long string, a deep array, another type), a number scaled, a key
deleted, added or duplicated, a value wrapped in an array, or the text cut or flipped. Each
runs one command (predict, plan, simulate, select --plan-only) and must:
  - end by itself (no signal, no hang past --timeout),
  - exit 0, 2, 3 or 5 (plan: the GPU count has no legal factorisation),
  - on exit 2 print one line on stderr, under 1000 characters, naming the mutant file and,
    unless the error is about the text itself (syntax, nesting), a key of the file.
Standard library only. `--mode ci` (ctest: ~1 minute on 2 cores) and `--mode dev` (1000
mutants per kind) differ only in counts and bases; `--seed` makes a run reproducible and
every failure prints the command and keeps the mutant under --keep.
Deliberately not here: `strata run` (it trains; its input checks are the same loaders, and
its own flags are tested in tests/tools/run_guard_cli_test.cc).
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

KINDS = ["model", "train", "cluster", "plan", "profile", "workload"]

# Bases: consistent (model, cluster, train, plan) sets. The tiny one is fast (milliseconds per
# command); the large ones exercise the published shapes (half a second per command).
WORLDS = {
    "tiny": dict(model="tiny", cluster="local-cpu", train="tiny", plan="tiny-3d"),
    "tiny-single": dict(model="tiny", cluster="local-cpu", train="tiny", plan="tiny-single"),
    "megatron-1t": dict(model="megatron-1t", cluster="selene-a100", train="megatron-1t",
                        plan="megatron-1t"),
    "gpt3": dict(model="gpt3-175b", cluster="selene-a100", train="gpt3-175b",
                 plan="gpt3-175b-zero3-384"),
}
CI_WORLDS = ["tiny", "tiny-single", "tiny", "megatron-1t"]
DEV_WORLDS = ["tiny", "tiny-single", "tiny", "tiny-single", "megatron-1t", "gpt3"]
CONFIG_SUBDIR = {"model": "models", "train": "train", "cluster": "clusters", "plan": "plans",
                 "workload": "workloads"}

RAW_NUMBERS = ["1e999", "-1e999", "1e-999", "NaN", "Infinity", "-Infinity", "00", "1.", ".5",
               "0x10", "+1", "18446744073709551616", "99999999999999999999999999"]
INTS = [0, -1, 1, 2, 3, 7, 64, 2**31 - 1, 2**31, 2**32, 2**53, 2**53 + 1, 2**62, 2**63 - 1,
        2**63, 2**64 - 1, -2**63, -2**62, 10**15, 10**18]
FLOATS = [0.0, -0.0, 0.5, -0.5, 1e-300, 5e-324, 1e-9, 1e300, 1e308, -1e308,
          1.7976931348623157e308, 4.5, 2.0**62, 9e15]
STRINGS = ["", "x", "none", "cpu", "cuda", "nvme", "interleaved", "1f1b", "gpipe", "full",
           "selective", "tiny", "local-cpu", "adamw", "bf16", "fp32", "all_reduce", "p2p",
           "../../etc/passwd", "/dev/null", "/", ".json", "a/b.json", "\u00e9\u4e2d", "\u0000x",
           "%s%n{}", "x" * 5000]


class Mutant:
    def __init__(self, text, notes):
        self.text = text
        self.notes = notes  # what was done, for the failure report


def paths_of(doc, prefix=()):
    """Every (path, value) in doc, containers included, root excluded."""
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.append((prefix + (k,), v))
            out.extend(paths_of(v, prefix + (k,)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.append((prefix + (i,), v))
            out.extend(paths_of(v, prefix + (i,)))
    return out


def keys_of(doc):
    keys = set()
    if isinstance(doc, dict):
        for k, v in doc.items():
            keys.add(str(k))
            keys |= keys_of(v)
    elif isinstance(doc, list):
        for v in doc:
            keys |= keys_of(v)
    return keys


def keys_in_text(text):
    """The keys of the final text, where Python can read it (a flipped byte makes new keys)."""
    keys = set()

    def hook(pairs):
        keys.update(k for k, _ in pairs)
        return dict(pairs)
    try:
        json.loads(text, object_pairs_hook=hook)
    except (ValueError, RecursionError):
        pass
    return keys


def get_parent(doc, path):
    node = doc
    for p in path[:-1]:
        node = node[p]
    return node


class Mutator:
    def __init__(self, rng, dev):
        self.rng = rng
        self.dev = dev
        self.raw = {}  # marker -> raw JSON text substituted after serialisation

    def marker(self, raw_text):
        m = "@@RAW%d@@" % len(self.raw)
        self.raw[m] = raw_text
        return m

    def interesting(self, old):
        r = self.rng
        roll = r.random()
        if roll < 0.30:
            return r.choice(INTS)
        if roll < 0.50:
            return r.choice(FLOATS)
        if roll < 0.62:
            return self.marker(r.choice(RAW_NUMBERS))
        if roll < 0.75:
            return r.choice(STRINGS)
        if roll < 0.80:
            # A long string: 1 MB in dev mode, once in a while the 50 MB.
            n = 50 << 20 if (self.dev and r.random() < 0.02) else (1 << 20 if self.dev else 70000)
            return self.marker(json.dumps("y" * n))
        if roll < 0.85:
            depth = 100000 if r.random() < 0.2 else r.choice([31, 32, 33, 40, 1000])
            return self.marker("[" * depth + "]" * depth)
        if roll < 0.95:
            return r.choice([True, False, None, [], {}, [1, 2], {"a": 1}, [old], {"x": old}])
        return old

    def perturb(self, v):
        r = self.rng
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return self.interesting(v)
        ops = [lambda x: x * 2, lambda x: x * 1024, lambda x: x * 2**20, lambda x: x * 2**40,
               lambda x: -x, lambda x: x + 1, lambda x: x - 1, lambda x: x // 2 if isinstance(x, int) else x / 2,
               lambda x: x * 1e300, lambda x: x / 1e300, lambda x: x * 0, lambda x: x + 0.5,
               lambda x: float(x)]
        try:
            return r.choice(ops)(v)
        except OverflowError:
            return self.marker("1e999")

    def mutate(self, doc):
        """One mutation in place (doc is a dict); returns a note."""
        r = self.rng
        paths = paths_of(doc)
        roll = r.random()
        if not paths:
            doc["x"] = 1
            return "added x"
        path, value = r.choice(paths)
        parent = get_parent(doc, path)
        last = path[-1]
        name = ".".join(str(p) for p in path)
        if roll < 0.45:
            parent[last] = self.interesting(value)
            return "replaced %s" % name
        if roll < 0.65:
            parent[last] = self.perturb(value)
            return "perturbed %s" % name
        if roll < 0.73:
            if isinstance(parent, dict):
                del parent[last]
            elif parent:
                parent.pop(last)
            return "deleted %s" % name
        if roll < 0.80:
            target = r.choice([c for _, c in paths if isinstance(c, dict)] + [doc])
            target[r.choice(["extra", "layres", "memory", "tp ", "", "source"])] = 1
            return "added a key"
        if roll < 0.88:
            targets = [c for _, c in paths if isinstance(c, dict) and c] + [doc]
            target = r.choice(targets)
            key = r.choice(list(target.keys()))
            target[self.marker(json.dumps(key))] = self.interesting(target[key])
            return "duplicated %s" % key
        if roll < 0.94:
            parent[last] = [value] if r.random() < 0.5 else {"value": value}
            return "wrapped %s" % name
        parent[last] = self.marker(r.choice(["NaN", "1e999", "-0", "1E+400", "[[[[]]]]"]))
        return "raw at %s" % name

    def text(self, doc):
        s = json.dumps(doc, indent=1, ensure_ascii=False)
        # A duplicated key's marker is a key; a raw value's marker is a quoted value.
        for m, raw in self.raw.items():
            s = s.replace(json.dumps(m), raw)
        return s

    def textual(self, s):
        r = self.rng
        if not s:
            return s, "empty"
        i = r.randrange(len(s))
        kind = r.random()
        if kind < 0.3:
            return s[:i], "truncated at %d" % i
        if kind < 0.6:
            return s[:i] + r.choice('{}[]":,0-e. \\x\u00ff') + s[i + 1:], "flipped byte %d" % i
        if kind < 0.8:
            return s[:i] + r.choice(['{', '[', '"', ',', '1e999', '//c', '\x00']) + s[i:], "inserted at %d" % i
        return s[:i] + s[i + 1:], "deleted byte %d" % i


def make_mutant(base_doc, rng, dev):
    doc = json.loads(json.dumps(base_doc))
    m = Mutator(rng, dev)
    notes = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        if not isinstance(doc, dict):
            break
        notes.append(m.mutate(doc))
    text = m.text(doc)
    if rng.random() < 0.08:
        text, note = m.textual(text)
        notes.append(note)
    return Mutant(text, notes), keys_of(base_doc) | keys_of(doc) | keys_in_text(text)


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def commands_for(kind, mutant_path, world, workdir, profile, rng):
    """The strata command lines that read the mutant (one is picked per mutant)."""
    w = dict(world)
    if kind in ("model", "train", "cluster", "plan"):
        w[kind] = mutant_path
    specs = ["--model", w["model"], "--cluster", w["cluster"], "--train", w["train"]]
    prof = ["--profile", mutant_path] if kind == "profile" else (
        ["--profile", profile] if rng.random() < 0.2 else [])
    cmds = []
    if kind == "workload":
        return [["select", "--workload", mutant_path, "--plan-only", "--gpus",
                 rng.choice(["1", "2", "4"])]]
    cmds.append(["predict"] + specs + ["--plan", w["plan"]] + prof)
    if kind != "plan":
        cmds.append(["plan"] + specs + ["--top", "2"] + prof)
    cmds.append(["simulate"] + specs + ["--plan", w["plan"]])
    if kind in ("model", "train") and w["model"] in ("tiny", mutant_path) and \
            w["train"] in ("tiny", mutant_path):
        # The loaders behind a workload's references: the mutant named from a workload file.
        wl = os.path.join(workdir, os.path.basename(mutant_path) + ".workload.json")
        with open(wl, "w", encoding="utf-8") as f:
            json.dump({"name": "fuzz", "jobs": [{"name": "j", "model": w["model"],
                                                 "train": w["train"], "steps": 3}]}, f)
        cmds.append(["select", "--workload", wl, "--plan-only", "--gpus", "2"])
    if kind == "profile":
        cmds.append(["select", "--workload", "tiny-grid", "--plan-only", "--profile", mutant_path])
    if kind == "cluster":
        cmds.append(["select", "--workload", "tiny-grid", "--plan-only", "--cluster", mutant_path])
    return cmds


SYNTAX_WORDS = ("not valid JSON", "nested deeper", "line ")


def check(result, mutant_path, keys):
    """None when the outcome obeys the contract, else why not."""
    rc, out, err, elapsed = result
    if rc is None:
        return "hung (killed after the timeout)"
    if rc < 0:
        return "killed by signal %d" % -rc
    if rc not in (0, 2, 3, 5):
        return "exit code %d" % rc
    if rc != 2:
        return None
    lines = [l for l in err.splitlines() if l.strip()]
    if len(lines) != 1:
        return "exit 2 with %d lines on stderr" % len(lines)
    line = lines[0]
    if len(line) > 1000:
        return "exit 2 with a %d-character message" % len(line)
    if mutant_path not in line:
        return "exit 2 message does not name the file"
    if any(w in line for w in SYNTAX_WORDS):
        return None
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", line))
    odd = [k for k in keys if not re.fullmatch(r"[A-Za-z0-9_]+", k)]
    # strata quotes an odd key as JSON without escaping non-ASCII characters (a flipped byte
    # can make one): accept either spelling.
    quoted = [json.dumps(k, ensure_ascii=a) for k in odd for a in (True, False)]
    if not (words & keys) and "(root)" not in line and not any(q in line for q in quoted):
        return "exit 2 message names no key of the file"
    return None


def run_one(strata, cmd, timeout):
    start = time.monotonic()
    try:
        p = subprocess.run([strata] + cmd, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", "", timeout
    return (p.returncode, p.stdout.decode("utf-8", "replace"),
            p.stderr.decode("utf-8", "replace"), time.monotonic() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", required=True, help="the strata binary")
    ap.add_argument("--configs", default=os.path.join(os.path.dirname(__file__), "..", "configs"))
    ap.add_argument("--profile", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                      "tools", "fuzz_profile.json"))
    ap.add_argument("--mode", choices=["ci", "dev"], default="ci")
    ap.add_argument("--mutants", type=int, help="per kind (default: ci 50, dev 1000)")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=float, help="seconds per command (default: ci 20, dev 30)")
    ap.add_argument("--keep", help="copy failing mutants here")
    ap.add_argument("--failures", help="write every failure here, one JSON object a line")
    args = ap.parse_args()
    dev = args.mode == "dev"
    per_kind = args.mutants or (1000 if dev else 50)
    timeout = args.timeout or (30.0 if dev else 20.0)
    rng = random.Random(args.seed)
    worlds = DEV_WORLDS if dev else CI_WORLDS
    profile = os.path.abspath(args.profile)
    workdir = tempfile.mkdtemp(prefix="strata-fuzz-")
    tasks = []
    for kind in args.kinds.split(","):
        for i in range(per_kind):
            world = WORLDS[rng.choice(worlds)]
            if kind == "profile":
                base = load(profile)
            elif kind == "workload":
                base = load(os.path.join(args.configs, "workloads", "tiny-grid.json"))
            else:
                base = load(os.path.join(args.configs, CONFIG_SUBDIR[kind], world[kind] + ".json"))
            mutant, keys = make_mutant(base, rng, dev)
            path = os.path.join(workdir, "%s-%04d.json" % (kind, i))
            with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
                f.write(mutant.text)
            cmd = rng.choice(commands_for(kind, path, world, workdir, profile, rng))
            tasks.append((kind, path, cmd, keys, mutant.notes))

    counts = {k: {"0": 0, "2": 0, "3": 0, "5": 0, "fail": 0} for k in KINDS}
    failures = []
    started = time.monotonic()
    slowest = (0.0, None)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_one, args.strata, t[2], timeout): t for t in tasks}
        for fut in concurrent.futures.as_completed(futures):
            kind, path, cmd, keys, notes = futures[fut]
            result = fut.result()
            why = check(result, path, keys)
            if result[3] > slowest[0]:
                slowest = (result[3], " ".join(cmd))
            if why:
                counts[kind]["fail"] += 1
                failures.append((kind, path, cmd, notes, why, result))
                if args.keep:
                    os.makedirs(args.keep, exist_ok=True)
                    shutil.copy(path, args.keep)
            else:
                counts[kind][str(result[0])] += 1
    elapsed = time.monotonic() - started
    for kind in args.kinds.split(","):
        c = counts[kind]
        print("%-9s %5d mutants: exit 0 %5d, exit 2 %5d, exit 3 %5d, exit 5 %5d, failures %d" %
              (kind, per_kind, c["0"], c["2"], c["3"], c["5"], c["fail"]))
    print("%d commands in %.1f s (slowest %.2f s: %s)" % (len(tasks), elapsed, slowest[0], slowest[1]))
    for kind, path, cmd, notes, why, result in failures[:20]:
        rc, out, err, _ = result
        print("FAIL %s: %s\n  mutations: %s\n  command: strata %s\n  stderr: %s" %
              (kind, why, "; ".join(notes), " ".join(cmd), err.strip()[:400]))
    if args.failures:
        with open(args.failures, "w", encoding="utf-8") as f:
            for kind, path, cmd, notes, why, result in failures:
                f.write(json.dumps({"kind": kind, "why": why, "notes": notes, "command": cmd,
                                    "exit": result[0], "stderr": result[2][:2000]}) + "\n")
    shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
