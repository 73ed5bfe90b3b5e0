#!/usr/bin/env python3
"""Issue 23's per-problem table of a bench over matrix-product problems (bench/gemm_tf32x3/suite.sh):
for each problem the winner's median time at its tuning shape, its TFLOP/s (the task's FLOP count from
the verdict's roofline, else torch's FlopCounterMode at the file's own size, over that time), the precision it computes in (from the tuner's point, in the
generated file's first line: 3xtf32 and fp32 are fp32-accurate; tf32 (one TF32 product) and tf32+bf16 (one TF32
product and a bf16 one of the cross terms) are kept only well
within the tolerance), the share of the tolerance its worst element used, and its speedup over torch
eager, over torch.compile, and end to end (the exported ModelNew's forward); then the geometric means
over every problem, a problem that did not pass counting as 1x (as eager: the user keeps eager). Where the
verdict measured the copy bandwidth, each problem's share of it (the bytes it must move at the least, over
its time; a KernelBench file: its inputs, weights and outputs once) beside eager's, and a line on the
memory-bound problems (under 10 FLOP a byte) that reach 85% of it.

  python3 bench/matmul_table.py BENCH_DIR/bench.json [--kernelbench COMMIT]
"""
from __future__ import annotations

import math
import re
import sys

from bench_table import print_title, read_bench


def num(v, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) and math.isfinite(v) else "-"


def final_step(row: dict) -> dict:
    """The run's final step that passed, else its last final step, else {}."""
    finals = [s for s in (row.get("report") or {}).get("steps", []) if s.get("role") == "final"]
    for s in finals:
        if (s.get("verdict") or {}).get("disposition") == "passed":
            return s
    return finals[-1] if finals else {}


def precision(step: dict) -> str:
    first = (step.get("source") or "").split("\n", 1)[0]
    if "built-in tuner" not in first:
        return "-"
    m = re.search(r"precision=([\w+]+)", first)
    return m.group(1) if m else "fp32"


def bandwidth(verdict: dict) -> tuple[float | None, float | None]:
    """The first timed shape's share of the measured copy bandwidth (percent) and its FLOP per byte moved."""
    for s in verdict.get("shapes", []):
        share = s.get("percent_of_copy_bandwidth")
        if not isinstance(share, (int, float)):
            continue
        least = s.get("least_bytes", s.get("bytes"))
        flops = s.get("flops")
        if flops is None and not s.get("overrides"):
            flops = (verdict.get("problem_bytes") or {}).get("flops")
        intensity = flops / least if isinstance(flops, (int, float)) and isinstance(least, (int, float)) and least > 0 else None
        return share, intensity
    return None, None


def timing(verdict: dict) -> tuple[float | None, float | None, float | None]:
    """The first timed shape's median ms, its TFLOP/s and the worst tolerance share over all shapes."""
    ms = tflops = None
    used = [s.get("tolerance_used") for s in verdict.get("shapes", []) if isinstance(s.get("tolerance_used"), (int, float))]
    for s in verdict.get("shapes", []):
        t = (s.get("time_ms") or {}).get("median")
        if not isinstance(t, (int, float)) or t <= 0:
            continue
        ms = t
        flops = None
        for term in ((s.get("roofline") or {}).get("terms") or []):
            if term.get("cost") == "flops" and isinstance(term.get("amount"), (int, float)):
                flops = term["amount"]
        # a KernelBench file without a cost model: the FLOPs torch's FlopCounterMode counted in one forward
        # at the file's own size (problem_bytes), where this shape is that size (no overrides)
        if flops is None and not s.get("overrides"):
            flops = (verdict.get("problem_bytes") or {}).get("flops")
        if isinstance(flops, (int, float)) and flops > 0:
            tflops = flops / (t * 1e-3) / 1e12
        break
    return ms, tflops, (max(used) if used else None)


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def main() -> int:
    b, kernelbench = read_bench(__doc__)
    rows = b.get("tasks", [])
    print_title(b, kernelbench)
    print(f"{len(rows)} problems, at their own sizes; finished: {b.get('finished')}.\n")
    print("| problem | result | precision | tolerance used | ms | TFLOP/s | % copy bandwidth (eager's) | x eager | x compile "
          "| x eager, end to end | reason |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    memory_bound: list[tuple[str, float]] = []
    means: dict[str, list[list[float]]] = {}  # level: [x eager], [x compile], [x end to end], [1 if passed]
    for r in rows:
        step = final_step(r)
        v = step.get("verdict") or {}
        ms, tflops, used = timing(v)
        share, intensity = bandwidth(v)
        passed = r.get("disposition") == "passed"
        name = r.get("path", "").rsplit("/", 1)[-1]
        speedup = r.get("speedup")
        eager_share = share / speedup if share is not None and isinstance(speedup, (int, float)) and speedup > 0 else None
        share_text = f"{num(share, '.0f')} ({num(eager_share, '.0f')})" if share is not None else "-"
        if passed and share is not None and intensity is not None and intensity < 10:
            memory_bound.append((name, share))
        level = name.split("_", 1)[0] if re.match(r"level\d+_", name) else "all"
        acc = means.setdefault(level, [[], [], [], []])
        for a, key in zip(acc, ("speedup", "speedup_vs_compile", "speedup_end_to_end")):
            x = r.get(key)
            a.append(x if passed and isinstance(x, (int, float)) and x > 0 else 1.0)
        acc[3].append(1 if passed else 0)
        reason = "" if passed else (r.get("error") or r.get("detail") or "")
        reason = reason.replace("|", "\\|").replace("\n", " ")[:140]
        print(f"| {name} | {r.get('disposition')} | {precision(step)} | {num(used, '.3g')} | "
              f"{num(ms, '.3f')} | {num(tflops, '.3g')} | {share_text} | {num(r.get('speedup'), '.3f')} | {num(r.get('speedup_vs_compile'), '.3f')} | "
              f"{num(r.get('speedup_end_to_end'), '.3f')} | {reason} |")
    print()
    for level, (eager, compile_, e2e, passed) in sorted(means.items()):
        print(f"{level}: {sum(passed)} of {len(eager)} passed. Geometric means over all {len(eager)} (a problem that did not pass "
              f"counts as 1x): x eager {num(geomean(eager), '.3f')}, x compile {num(geomean(compile_), '.3f')}, "
              f"x eager end to end {num(geomean(e2e), '.3f')}.")
    if memory_bound:
        low = [f"{n.split('_', 2)[1] if n.startswith('level') else n} {p:.0f}%" for n, p in memory_bound if p < 85]
        print(f"\nMemory-bound (under 10 FLOP a byte moved), passed: {len(memory_bound) - len(low)} of {len(memory_bound)} at 85% "
              f"of the measured copy bandwidth or more" + (f"; below it: {', '.join(low)}." if low else "."))
    return 0


if __name__ == "__main__":
    sys.exit(main())
