#!/usr/bin/env python3
"""Pictures of a `strata run --out DIR`: what `strata plot DIR` runs.

DIR may also be a `strata simulate --out DIR` (report.json a prediction, trace.json the
simulated step): the same pictures of the prediction alone, and no loss.png (a prediction
has no losses).

Writes four PNGs, each FIGURE_WIDTH_PX x FIGURE_HEIGHT_PX pixels (a fixed figure size and dpi,
so that a test knows the size without reading this file's plotting code):

  loss.png        training loss per step (metrics.jsonl, else report.json's losses) and the
                  validation loss where the run measured one (metrics.jsonl's eval_loss)
  step_parts.png  the measured step time by part (report.json "parts"), beside the
                  predicted parts when --predicted names a `strata predict --json` output or
                  a `strata plan --out` file
  memory.png      each rank's peak memory by kind (params, gradients, optimizer, activations,
                  buffers, headroom), stacked, per tier that holds any (memory_tags.json
                  "by_kind"); a run whose files carry no kinds gets its ranks' total peaks,
                  and the picture says so
  timeline.png    the run's trace.json (the last step, every op): one row per rank and
                  stream, each op coloured by its kind

Deliberately no checks of the run itself beyond what drawing needs (the strata binary checks
its inputs before running this), and only matplotlib beyond the standard library: it is
Debian's python3-matplotlib. Each PNG is written under a temporary name and renamed, so a
failure leaves no half-written picture. Exit code 0 when written, 2 on a bad input or a
missing matplotlib.
"""
import argparse
import json
import os
import sys

FIGURE_WIDTH_IN = 9
FIGURE_HEIGHT_IN = 5
DPI = 100
FIGURE_WIDTH_PX = FIGURE_WIDTH_IN * DPI    # 900
FIGURE_HEIGHT_PX = FIGURE_HEIGHT_IN * DPI  # 500

# report.json "parts" in the order the CLI prints them, and their labels.
PARTS = [
    ("forward_s", "forward"), ("backward_s", "backward"), ("recompute_s", "recompute"),
    ("tp_comm_s", "TP comm"), ("pp_comm_s", "PP comm"), ("dp_comm_s", "DP comm"),
    ("offload_s", "offload"), ("optimizer_s", "optimizer"), ("bubble_s", "bubble"),
    ("other_s", "other"),
]
# cost_model/specs/memory_kinds.h's kinds, bottom of the stack first.
MEMORY_KINDS = ["params", "gradients", "optimizer", "activations", "buffers", "headroom"]
TIERS = ["device", "host", "nvme"]
# cost_model/program/chrome_trace.h: tid = 5 * pp_rank + stream. A trace names the threads it has
# names for; a thread it does not name is labelled by this convention.
STREAMS = ["compute", "comm", "copy", "p2p", "host"]


class InputError(Exception):
    """A run directory or prediction file that cannot be drawn: exit 2."""


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot be read ({e.strerror})") from e
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON ({e})") from e


def read_metrics(path):
    """metrics.jsonl's lines as dicts; a torn last line (a run killed mid-write) is left out."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def report_of(doc, path):
    """The StepReport in a prediction, a plan file (its "prediction") or a run's report."""
    if "prediction" in doc and isinstance(doc["prediction"], dict):
        doc = doc["prediction"]
    if "parts" not in doc or "step_time_s" not in doc:
        raise InputError(f"{path}: no 'parts' or 'step_time_s': expected a run's report.json, "
                         "`strata predict --json` output or a `strata plan --out` file")
    return doc


def new_figure(plt):
    return plt.figure(figsize=(FIGURE_WIDTH_IN, FIGURE_HEIGHT_IN), dpi=DPI)


def save(fig, out_dir, name, written):
    """Writes out_dir/name at the fixed size (no tight bounding box: it would change it)."""
    final = os.path.join(out_dir, name)
    temporary = os.path.join(out_dir, f".{name}.{os.getpid()}.tmp.png")
    try:
        fig.savefig(temporary, dpi=DPI, format="png")
        os.replace(temporary, final)
    except OSError as e:
        raise InputError(f"--out: cannot write {final} ({e.strerror})") from e
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    written.append(name)


def bytes_unit(largest):
    """The binary unit that suits `largest` bytes, as (divisor, name)."""
    for power, name in ((3, "GiB"), (2, "MiB"), (1, "KiB")):
        if largest >= 1024 ** power:
            return 1024 ** power, name
    return 1, "B"


def plot_loss(plt, run_dir, report):
    steps, losses, eval_steps, eval_losses = [], [], [], []
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    if os.path.exists(metrics_path):
        for row in read_metrics(metrics_path):
            if "loss" in row and "step" in row:
                steps.append(row["step"])
                losses.append(row["loss"])
            if "eval_loss" in row and "step" in row:
                eval_steps.append(row["step"])
                eval_losses.append(row["eval_loss"])
    if not steps:  # an older run without metrics.jsonl: report.json's losses, steps from 1
        losses = list(report.get("losses", []))
        steps = list(range(1, len(losses) + 1))
    fig = new_figure(plt)
    ax = fig.add_subplot()
    ax.plot(steps, losses, color="C0", linewidth=2, label="training")
    if eval_steps:
        ax.plot(eval_steps, eval_losses, color="C1", linewidth=2, marker="o", markersize=6,
                label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(f"Loss, {report.get('plan_label', '')}")
    ax.grid(True, alpha=0.3)
    if steps:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no losses recorded", ha="center", transform=ax.transAxes)
    return fig


def plot_step_parts(plt, measured, predicted):
    """The step time by part: measured, predicted, or both side by side (either may be None)."""
    sides = [(name, doc, colour) for name, doc, colour in
             (("measured", measured, "C0"), ("predicted", predicted, "C1")) if doc is not None]
    shown = [(key, label) for key, label in PARTS
             if any(doc["parts"].get(key, 0) > 0 for _, doc, _ in sides)]
    fig = new_figure(plt)
    ax = fig.add_subplot()
    rows = list(range(len(shown)))
    height = 0.8 / len(sides)
    for i, (name, doc, colour) in enumerate(sides):
        offset = (i - (len(sides) - 1) / 2) * height
        ax.barh([r + offset for r in rows], [doc["parts"].get(k, 0) for k, _ in shown],
                height=height, color=colour, label=f"{name} (step {doc['step_time_s']:.4f} s)")
    title = "Step time by part, " + " beside ".join(name for name, _, _ in sides)
    ax.set_yticks(rows, [label for _, label in shown])
    ax.invert_yaxis()  # the first part on top, as the CLI prints them
    ax.set_xlabel("seconds per step")
    ax.set_title(f"{title}, {sides[0][1].get('plan_label', '')}")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def by_kind_of(rank, tier):
    return {k: rank["by_kind"].get(k, {}).get(tier, 0) for k in MEMORY_KINDS}


def memory_bars(run_dir, report, predicted, rank_key="rank"):
    """[(rank label, tier, measured {kind: bytes}, predicted {kind: bytes} or None)] and
    whether the bytes are by kind. A prediction prices one rank per pipeline stage, so a
    measured rank is set beside the predicted rank of its pp_rank."""
    ranks = []
    tags_path = os.path.join(run_dir, "memory_tags.json")
    if os.path.exists(tags_path):
        ranks = read_json(tags_path).get("ranks", [])
    if not any("by_kind" in r for r in ranks):
        ranks = report.get("per_rank", [])
    by_kind = any("by_kind" in r for r in ranks)
    predicted_stages = {}
    if by_kind and predicted is not None:
        predicted_stages = {r.get("pp_rank"): r for r in predicted.get("per_rank", [])
                            if "by_kind" in r}
    bars = []
    for r in ranks:
        label = f"{rank_key} {r.get(rank_key, len(bars))}"
        stage = predicted_stages.get(r.get("pp_rank"))
        for tier in TIERS:
            if by_kind:
                kinds = by_kind_of(r, tier)
            else:
                kinds = {"total": r.get("peak_bytes", {}).get(tier, 0)}
            priced = by_kind_of(stage, tier) if stage is not None else None
            if sum(kinds.values()) > 0 or (priced is not None and sum(priced.values()) > 0):
                bars.append((label, tier, kinds, priced))
    return bars, by_kind


def plot_memory(plt, run_dir, report, predicted, plain="measured"):
    """Peak memory by kind per rank: `report`'s (`plain`: "measured", or "predicted" when
    the directory is a prediction's, one bar per pipeline stage) beside `predicted`'s."""
    bars, by_kind = memory_bars(run_dir, report, predicted,
                                "pp_rank" if plain == "predicted" else "rank")
    beside = any(priced is not None for _, _, _, priced in bars)
    fig = new_figure(plt)
    ax = fig.add_subplot()
    largest = max((max(sum(m.values()), sum((p or {}).values())) for _, _, m, p in bars),
                  default=0)
    divisor, unit = bytes_unit(largest)
    tiers_shown = {tier for _, tier, _, _ in bars}
    labels = [label if tiers_shown == {"device"} else f"{label}\n{tier}"
              for label, tier, _, _ in bars]
    kinds = MEMORY_KINDS if by_kind else ["total"]
    width = 0.38 if beside else 0.6
    # (name, the bar's bytes by kind, x offset, hatch)
    columns = [(plain, lambda bar: bar[2], -width / 2 if beside else 0, None)]
    if beside:
        columns.append(("predicted", lambda bar: bar[3] or {}, width / 2, "//"))
    for column, values, offset, hatch in columns:
        bottoms = [0.0] * len(bars)
        for i, kind in enumerate(kinds):
            heights = [values(bar).get(kind, 0) / divisor for bar in bars]
            if not any(heights):
                continue
            ax.bar([x + offset for x in range(len(bars))], heights, bottom=bottoms,
                   color=f"C{i}", width=width, hatch=hatch, edgecolor="white",
                   label=kind if column == plain else None)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax.set_xticks(range(len(bars)), labels)
    ax.set_ylabel(f"peak memory ({unit})")
    if by_kind:
        ax.set_title(f"Peak memory by kind, per {'pipeline stage, predicted' if plain == 'predicted' else 'rank'}"
                     + (": measured (plain) beside predicted (hatched)" if beside else ""))
    else:
        ax.set_title("Peak memory per rank (these files record no kinds: totals only)")
    ax.grid(True, axis="y", alpha=0.3)
    if bars:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.text(0.5, 0.5, "no memory recorded", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig


def outermost_events(events):
    """Per thread, the events not inside another one (a pass holds its body's ops)."""
    by_thread = {}
    for e in events:
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    kept = {}
    for key, thread in by_thread.items():
        thread.sort(key=lambda e: (e["ts"], -e["dur"]))
        end = float("-inf")
        kept[key] = []
        for e in thread:
            if e["ts"] >= end:
                kept[key].append(e)
                end = e["ts"] + e["dur"]
    return kept


def plot_timeline(plt, trace_path):
    doc = read_json(trace_path)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    process_names, thread_names = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            process_names[e["pid"]] = e.get("args", {}).get("name", "")
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            thread_names[(e["pid"], e["tid"])] = e.get("args", {}).get("name", "")
    ops = [e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e]
    threads = outermost_events(ops)
    rows = sorted(threads)
    names = sorted({e["name"] for thread in threads.values() for e in thread})
    palette = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    colour = {name: palette(i % palette.N) for i, name in enumerate(names)}
    origin = min((e["ts"] for e in ops), default=0)

    # Sends, receives and the optimizer's tail can last a thousandth of the step: at their
    # own width they would fall under a pixel (and under the bars' white edges) and vanish.
    # Every op is drawn at least 0.3% of the step wide (about 2 pixels), without an edge.
    end = max((e["ts"] + e["dur"] for e in ops), default=origin)
    min_ms = (end - origin) / 1000 * 0.003

    fig = new_figure(plt)
    ax = fig.add_subplot()
    for row, key in enumerate(rows):
        for e in threads[key]:
            width = e["dur"] / 1000
            short = width < min_ms
            ax.barh(row, max(width, min_ms), left=(e["ts"] - origin) / 1000, height=0.8,
                    color=colour[e["name"]], edgecolor="white", linewidth=0 if short else 0.3)

    def row_label(key):
        process = process_names.get(key[0], f"pid {key[0]}").split(" (")[0]
        stream = thread_names.get(key, "").split(" ")[-1] or STREAMS[key[1] % len(STREAMS)]
        return f"{process} {stream}"

    ax.set_yticks(range(len(rows)), [row_label(k) for k in rows])
    ax.invert_yaxis()
    ax.set_xlabel("ms from the step's first op")
    ax.set_title(f"Timeline of the last step ({os.path.basename(trace_path)})")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[n]) for n in names]
    if names:
        ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    else:
        ax.text(0.5, 0.5, "no ops in the trace", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig


def import_pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or None after saying what to install."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only: no display, no network
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"strata plot: matplotlib is not installed for {sys.executable}: install Debian's "
              "python3-matplotlib (apt-get install python3-matplotlib), or set STRATA_PYTHON "
              "to a python3 that has matplotlib", file=sys.stderr)
        return None
    return plt


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", nargs="?", help="a `strata run --out` directory")
    parser.add_argument("--out", help="where the PNGs go (default: the run directory)")
    parser.add_argument("--predicted", help="`strata predict --json` output or a plan file")
    parser.add_argument("--check", action="store_true",
                        help="only check that matplotlib imports (`strata run --plot`, before it "
                        "trains)")
    args = parser.parse_args()
    if args.check:
        return 0 if import_pyplot() is not None else 2
    if args.run_dir is None:
        parser.error("RUN_DIR is required")
    out_dir = args.out or args.run_dir
    try:
        report = report_of(read_json(os.path.join(args.run_dir, "report.json")),
                           os.path.join(args.run_dir, "report.json"))
        # `strata simulate --out`: the prediction is the report (cost_model/specs/step_report.h's
        # kind); the strata binary refuses --predicted beside it.
        is_prediction = report.get("kind") == "prediction"
        predicted = None
        if args.predicted:
            predicted = report_of(read_json(args.predicted), args.predicted)
    except InputError as e:
        print(f"strata plot: {e}", file=sys.stderr)
        return 2

    plt = import_pyplot()
    if plt is None:
        return 2

    written, skipped = [], []
    try:
        try:
            os.makedirs(out_dir, exist_ok=True)
        except OSError as e:
            raise InputError(f"--out: directory '{out_dir}' cannot be made ({e.strerror})") from e
        if is_prediction:
            drawings = (("step_parts.png", lambda: plot_step_parts(plt, None, report)),
                        ("memory.png", lambda: plot_memory(plt, args.run_dir, report, None,
                                                           "predicted")))
            skipped.append("loss.png (a prediction has no losses)")
        else:
            drawings = (("loss.png", lambda: plot_loss(plt, args.run_dir, report)),
                        ("step_parts.png", lambda: plot_step_parts(plt, report, predicted)),
                        ("memory.png", lambda: plot_memory(plt, args.run_dir, report, predicted)))
        for name, draw in drawings:
            fig = draw()
            save(fig, out_dir, name, written)
            plt.close(fig)
        trace_path = os.path.join(args.run_dir, "trace.json")
        if os.path.exists(trace_path):
            fig = plot_timeline(plt, trace_path)
            save(fig, out_dir, "timeline.png", written)
            plt.close(fig)
        else:
            skipped.append("timeline.png (no trace.json in the run directory)")
    except InputError as e:
        print(f"strata plot: {e}", file=sys.stderr)
        return 2
    print(f"wrote {os.path.join(out_dir, written[0])}"
          + "".join(f", {name}" for name in written[1:])
          + f" ({FIGURE_WIDTH_PX} x {FIGURE_HEIGHT_PX} pixels each)")
    for note in skipped:
        print(f"not drawn: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
