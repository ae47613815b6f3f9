#!/usr/bin/env python3
"""The speed phase's verdict and table (tools/device/gpu_phases.sh, phase_speed; issue 41).

For each model: strata's tokens/s, MFU and peak device memory from its run's report.json,
PyTorch's from the JSON line of tools/bench/pytorch_gpt2.py / pytorch_llama.py, the ratio
strata / PyTorch against the model's target; then where one step's GPU time goes on each side,
side by side: strata's from the trace.json of a `strata run --kernel-trace` (the last step's
layer-op spans, category "kernel", and its tail ops: the gradient norm and the optimizer),
PyTorch's from torch.profiler (the JSON's top_kernels). A run may add a fourth file, the
report of the same run with --cuda-graphs (each step replayed as one CUDA graph): its tokens/s
and its speed-up over the run issued op by op are shown; the target ratio is met by the faster
of the two, and the graphs run must train to the other's losses (relative 1e-5: the same
kernels in the same order, so the same bits but for the order of a GPU's atomics).

Prints one line (the summary's figure: each model's ratio, and what missed its target) and
writes the table to --table. Exit code 0 when every model has both sides' figures and meets
its targets, 1 otherwise (the line says what).

Usage: speed_table.py --table FILE [--top N] [--target MODEL=RATIO ...] [--min-mfu MODEL=FRACTION ...]
         MODEL=REPORT:TRACE:PYTORCH_JSON[:GRAPHS_REPORT] ...
"""

import argparse
import json
import sys

NAME_WIDTH = 44


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--table", required=True, help="file the side-by-side table is written to")
    p.add_argument("--top", type=int, default=15, help="ops per side (default 15)")
    p.add_argument("--target", action="append", default=[], metavar="MODEL=RATIO",
                   help="the least strata / PyTorch tokens/s ratio MODEL must reach")
    p.add_argument("--min-mfu", action="append", default=[], metavar="MODEL=FRACTION",
                   help="the least MFU strata must reach on MODEL")
    p.add_argument("runs", nargs="+", metavar="MODEL=REPORT:TRACE:PYTORCH_JSON[:GRAPHS_REPORT]")
    args = p.parse_args(argv)
    if args.top < 1:
        p.error(f"--top: value {args.top}, expected >= 1")

    def pairs(items, flag):
        out = {}
        for item in items:
            name, sep, value = item.partition("=")
            try:
                out[name] = float(value)
            except ValueError:
                sep = ""
            if not sep or not name:
                p.error(f"{flag}: value '{item}', expected MODEL=NUMBER")
        return out

    args.target = pairs(args.target, "--target")
    args.min_mfu = pairs(args.min_mfu, "--min-mfu")
    runs = []
    for item in args.runs:
        name, sep, files = item.partition("=")
        parts = files.split(":")
        if not sep or not name or len(parts) not in (3, 4):
            p.error(f"run '{item}': expected MODEL=REPORT:TRACE:PYTORCH_JSON[:GRAPHS_REPORT]")
        runs.append((name, *parts[:3], parts[3] if len(parts) == 4 else None))
    args.runs = runs
    return args


def read_json(path):
    """The JSON object in `path` (a report), or the last line of it that is one (a script's
    stdout); None when there is none."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    try:
        value = json.loads(text)
        return value if isinstance(value, dict) else None
    except ValueError:
        pass
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def strata_ops(trace):
    """{op name: (ms, calls)} of one step's GPU time: the layer ops' spans and the tail ops."""
    totals = {}
    for e in trace.get("traceEvents", []):
        if e.get("cat") not in ("kernel", "tail"):
            continue
        ms, calls = totals.get(e["name"], (0.0, 0))
        totals[e["name"]] = (ms + float(e.get("dur", 0)) / 1e3, calls + 1)
    return totals


def pytorch_ops(result):
    return {k["name"]: (float(k["ms"]), int(k["calls"])) for k in result.get("top_kernels", [])}


def top(ops, n):
    return sorted(ops.items(), key=lambda kv: -kv[1][0])[:n]


def short(name):
    return name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 3] + "..."


def side(ops, busy_ms, i):
    if i >= len(ops):
        return " " * (NAME_WIDTH + 24)
    name, (ms, calls) = ops[i]
    share = f"{100 * ms / busy_ms:5.1f}%" if busy_ms > 0 else "    -"
    return f"{short(name):<{NAME_WIDTH}} {ms:8.2f} ms {calls:5d} {share}"


def figures(framework, run):
    mfu = run.get("mfu")
    peak = run.get("peak_mem_gib")
    if peak is None and "memory_bytes" in run:
        peak = run["memory_bytes"].get("device", 0) / 2**30
    return (f"{framework} {run['tokens_per_s']:,.0f} tokens/s, MFU "
            f"{'-' if mfu is None else f'{100 * mfu:.1f}%'}, peak "
            f"{'-' if peak is None else f'{peak:.2f} GiB'}")


LOSS_RTOL = 1e-5


def with_graphs(name, strata, graphs_report, problems):
    """The --cuda-graphs run beside the one issued op by op: the line's words, and the
    faster of the two (the one the target ratio is taken with)."""
    graphs = read_json(graphs_report)
    if graphs is None or "tokens_per_s" not in graphs:
        problems.append(f"{name}: no --cuda-graphs report ({graphs_report})")
        return [], strata
    if not graphs.get("captured_steps"):
        problems.append(f"{name}: the --cuda-graphs run did not capture its steps ({graphs_report})")
    words = [f"--cuda-graphs {graphs['tokens_per_s']:,.0f} tokens/s"]
    if strata is None or "tokens_per_s" not in strata:
        return words, graphs
    words[0] += f" ({graphs['tokens_per_s'] / strata['tokens_per_s']:.3f}x op by op)"
    eager_losses, graph_losses = strata.get("losses", []), graphs.get("losses", [])
    same = len(eager_losses) == len(graph_losses) and all(
        abs(g - e) <= LOSS_RTOL * abs(e) for e, g in zip(eager_losses, graph_losses))
    if not same:
        problems.append(f"{name}: the --cuda-graphs losses {graph_losses} are not the op-by-op "
                        f"run's {eager_losses}")
    return words, graphs if graphs["tokens_per_s"] > strata["tokens_per_s"] else strata


def model_section(args, name, report, trace, pytorch, graphs_report, problems):
    lines = []
    strata = read_json(report)
    torch_run = read_json(pytorch)
    traced = read_json(trace)
    if strata is None or "tokens_per_s" not in strata:
        problems.append(f"{name}: no strata report ({report})")
    if torch_run is None or "tokens_per_s" not in torch_run:
        problems.append(f"{name}: no PyTorch result ({pytorch})"
                        + (f": {torch_run['error']}" if torch_run and "error" in torch_run else ""))
    ratio = None
    head = []
    best = strata
    if strata is not None and "tokens_per_s" in strata:
        head.append(figures("strata", strata))
    if graphs_report is not None:
        words, best = with_graphs(name, strata, graphs_report, problems)
        head.extend(words)
    if torch_run is not None and "tokens_per_s" in torch_run:
        head.append(figures("PyTorch", torch_run))
        if best is not None and "tokens_per_s" in best:
            ratio = best["tokens_per_s"] / torch_run["tokens_per_s"]
            target = args.target.get(name)
            head.append(f"ratio {ratio:.3f}" + ("" if target is None else f" (target {target:.2f})"))
            if target is not None and ratio < target:
                problems.append(f"{name} ratio {ratio:.3f} < {target:.2f}")
    min_mfu = args.min_mfu.get(name)
    if min_mfu is not None and strata is not None and strata.get("mfu") is not None:
        if strata["mfu"] < min_mfu:
            problems.append(f"{name} MFU {100 * strata['mfu']:.1f}% < {100 * min_mfu:.0f}%")
    lines.append(f"{name}: " + " | ".join(head))
    s_ops = strata_ops(traced) if traced is not None else {}
    if not s_ops:
        problems.append(f"{name}: no kernel spans in {trace}")
    p_ops = pytorch_ops(torch_run) if torch_run is not None else {}
    if torch_run is not None and "tokens_per_s" in torch_run and not p_ops:
        problems.append(f"{name}: no top_kernels in {pytorch}")
    s_busy = sum(ms for ms, _ in s_ops.values())
    p_busy = float(torch_run.get("profiled_gpu_ms", 0)) if torch_run else 0.0
    s_top, p_top = top(s_ops, args.top), top(p_ops, args.top)
    width = NAME_WIDTH + 24
    lines.append(f"  {'strata, one step (--kernel-trace): op':<{width}} | "
                 f"PyTorch, one step (torch.profiler): kernel")
    lines.append(f"  {f'GPU time in these spans: {s_busy:.2f} ms':<{width}} | "
                 f"GPU time in kernels: {p_busy:.2f} ms")
    for i in range(max(len(s_top), len(p_top))):
        lines.append(f"  {side(s_top, s_busy, i)} | {side(p_top, p_busy, i)}".rstrip())
    return lines, ratio


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    problems, lines, ratios = [], [], []
    for name, report, trace, pytorch, graphs in args.runs:
        section, ratio = model_section(args, name, report, trace, pytorch, graphs, problems)
        lines.extend(section)
        ratios.append(f"{name} {'-' if ratio is None else f'{ratio:.3f}'}")
    with open(args.table, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    line = "strata / PyTorch tokens/s: " + ", ".join(ratios)
    if problems:
        line += "; " + "; ".join(problems)
    print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
