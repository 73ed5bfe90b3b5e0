#!/usr/bin/env python3
"""Issue 23's per-problem table of a bench over matrix-product problems (bench/gemm_tf32x3/suite.sh):
for each problem the winner's median time at its tuning shape, its TFLOP/s (the task's FLOP count from
the verdict's roofline, else torch's FlopCounterMode at the file's own size, over that time), the precision it computes in (from the tuner's point, in the
generated file's first line: 3xtf32 and fp32 are fp32-accurate; tf32 (one TF32 product) and tf32+bf16 (one TF32
product and a bf16 one of the cross terms) are kept only well
within the tolerance), the share of the tolerance its worst element used, and its speedup over torch
eager, over torch.compile, and end to end (the exported ModelNew's forward); then the geometric means
over every problem, a problem that did not pass counting as 1x (as eager: the user keeps eager).

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
    print("| problem | result | precision | tolerance used | ms | TFLOP/s | x eager | x compile | x eager, end to end | reason |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    means: dict[str, list[list[float]]] = {}  # level: [x eager], [x compile], [x end to end], [1 if passed]
    for r in rows:
        step = final_step(r)
        v = step.get("verdict") or {}
        ms, tflops, used = timing(v)
        passed = r.get("disposition") == "passed"
        name = r.get("path", "").rsplit("/", 1)[-1]
        level = name.split("_", 1)[0] if re.match(r"level\d+_", name) else "all"
        acc = means.setdefault(level, [[], [], [], []])
        for a, key in zip(acc, ("speedup", "speedup_vs_compile", "speedup_end_to_end")):
            x = r.get(key)
            a.append(x if passed and isinstance(x, (int, float)) and x > 0 else 1.0)
        acc[3].append(1 if passed else 0)
        reason = "" if passed else (r.get("error") or r.get("detail") or "")
        reason = reason.replace("|", "\\|").replace("\n", " ")[:140]
        print(f"| {name} | {r.get('disposition')} | {precision(step)} | {num(used, '.3g')} | "
              f"{num(ms, '.3f')} | {num(tflops, '.3g')} | {num(r.get('speedup'), '.3f')} | {num(r.get('speedup_vs_compile'), '.3f')} | "
              f"{num(r.get('speedup_end_to_end'), '.3f')} | {reason} |")
    print()
    for level, (eager, compile_, e2e, passed) in sorted(means.items()):
        print(f"{level}: {sum(passed)} of {len(eager)} passed. Geometric means over all {len(eager)} (a problem that did not pass "
              f"counts as 1x): x eager {num(geomean(eager), '.3f')}, x compile {num(geomean(compile_), '.3f')}, "
              f"x eager end to end {num(geomean(e2e), '.3f')}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
