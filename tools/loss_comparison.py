"""Step-by-step loss comparison of two training runs (strata against PyTorch), in plain Python.

compare_losses() gives the verdict and the lines tools/pytorch_cuda_parity.py prints: every
step's relative difference |s - t| / |t| within a bound, as many steps on both sides, and the
reference loss falling. A step over the bound prints its real relative difference (a
check that printed `inf` for finite losses over the bound hid how far they were); a step where
either loss is not finite prints `nan` and fails. Kept apart from the PyTorch trainer so that
its self-test (`python3 tools/loss_comparison.py`) runs where torch is not installed.
"""
import math
import sys


def relative_difference(s, t):
    """|s - t| / |t| for finite losses; nan when either is not finite (nothing to compare).
    A zero reference gives 0 when s is 0 too and inf otherwise (a finite, unbounded error)."""
    if not (math.isfinite(s) and math.isfinite(t)):
        return float("nan")
    if t == 0:
        return 0.0 if s == 0 else float("inf")
    return abs(s - t) / abs(t)


def compare_losses(strata_losses, reference_losses, bound, min_drop, names=("strata", "pytorch")):
    """(ok, lines): every step's relative difference within bound, the same number of steps,
    every loss finite, and the reference loss falling by min_drop (a fraction of its first)."""
    if len(strata_losses) != len(reference_losses) or not reference_losses:
        return False, [f"{names[0]} has {len(strata_losses)} losses, {names[1]} {len(reference_losses)}"]
    lines, ok = [], True
    worst, worst_step, not_finite = -1.0, 0, []
    for i, (s, t) in enumerate(zip(strata_losses, reference_losses)):
        rel = relative_difference(s, t)
        if math.isnan(rel):
            not_finite.append(i + 1)
        elif rel > worst:
            worst, worst_step = rel, i + 1
        over = math.isnan(rel) or rel > bound
        ok = ok and not over
        lines.append(f"step {i + 1}: {names[0]} {s:.5f} {names[1]} {t:.5f} relative {rel:.2e}"
                     + ("  <-- over the bound" if over else ""))
    first, last = reference_losses[0], reference_losses[-1]
    drop = (first - last) / first if math.isfinite(first) and math.isfinite(last) and first != 0 else float("nan")
    learned = drop >= min_drop
    worst_text = (f"worst loss relative error {100 * worst:.2f}% at step {worst_step}" if worst >= 0
                  else "no step with two finite losses")
    if not_finite:
        worst_text += f"; not finite at step(s) {', '.join(map(str, not_finite))}"
    lines.append(f"{worst_text} over {len(reference_losses)} steps (bound {100 * bound:.0f}%); "
                 f"{names[1]}'s loss {first:.3f} -> {last:.3f} ({100 * drop:.0f}% lower, "
                 f"at least {100 * min_drop:.0f}% needed)")
    return ok and learned, lines


def self_test():
    """Each check names what it guards; exit code 0 when all hold."""
    failures = []

    def expect(cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            failures.append(what)

    def run(s, t):
        return compare_losses(s, t, bound=0.01, min_drop=0.05)

    ok, _ = run([5.0, 4.0], [5.0, 4.0])
    expect(ok, "equal falling losses pass")
    ok, _ = run([5.0, 4.02], [5.0, 4.0])
    expect(ok, "0.5% apart passes")
    ok, lines = run([5.0, 4.08], [5.0, 4.0])
    # |4.08 - 4.0| / 4.0 = 2.00e-02: the real value, never inf.
    expect(not ok and "relative 2.00e-02" in lines[1], "2% apart fails and prints relative 2.00e-02")
    expect("worst loss relative error 2.00% at step 2" in lines[-1], "the summary names the worst finite step")
    # The H200's step 8 of GPT-2 124M: |11.11098 - 11.35349| / 11.35349 = 2.136e-02.
    ok, lines = run([11.5, 11.11098], [11.5, 11.35349])
    expect("relative 2.14e-02" in lines[1] and "inf" not in "".join(lines),
           "a finite loss over the bound prints its relative error, not inf")
    ok, lines = run([5.0, float("nan")], [5.0, 4.0])
    expect(not ok and "relative nan" in lines[1] and "not finite at step(s) 2" in lines[-1],
           "a NaN loss fails and prints nan")
    ok, lines = run([5.0, float("inf")], [5.0, 4.0])
    expect(not ok and "relative nan" in lines[1], "an infinite loss fails and prints nan")
    ok, _ = run([5.0], [5.0, 4.0])
    expect(not ok, "a run with fewer steps fails")
    ok, _ = run([5.0, 4.99], [5.0, 4.99])
    expect(not ok, "losses that do not fall fail")
    expect(relative_difference(0.0, 0.0) == 0.0 and relative_difference(1.0, 0.0) == float("inf"),
           "a zero reference compares without dividing by zero")
    print("PASSED" if not failures else f"FAILED: {len(failures)} check(s)")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(self_test())
