#!/usr/bin/env python3
"""Every point the tuner measured in a bench, from its bench.json (tasks[].report.steps): the template and its
parameters, the result, the median time of the first tuning shape, its share of the measured copy bandwidth and
the speedup over torch eager; the final check's row last. For comparing a grid's points between runs.

  python3 bench/points_table.py BENCH_DIR/bench.json
"""
from __future__ import annotations

import json
import re
import sys


def point_of(step: dict) -> str:
    """The template and parameters a step's detail opens with ("cuda_pool (block=256, ...): correct ..."), or
    the step's role where there are none (the final check)."""
    m = re.match(r"([a-z0-9_]+ \([^)]*\))", step.get("detail") or "")
    return m.group(1) if m else step.get("role", "-")


def cell(v, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) else "-"


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    b = json.load(open(sys.argv[1]))
    print("| problem | step | point | result | ms | % copy bandwidth | x eager |")
    print("|---|---|---|---|---|---|---|")
    for t in b.get("tasks", []):
        report = t.get("report") if isinstance(t.get("report"), dict) else {}
        for i, s in enumerate(report.get("steps", []), 1):
            v = s.get("verdict") or {}
            shape = (v.get("shapes") or [{}])[0]
            ms = (shape.get("candidate_ms") or shape.get("time_ms") or {}).get("median")
            print(f"| {t.get('task')} | {i} | {point_of(s)} | {v.get('disposition', s.get('disposition', '-'))} | {cell(ms, '.3f')} | "
                  f"{cell(shape.get('percent_of_copy_bandwidth'), '.1f')} | {cell(v.get('speedup', s.get('speedup')), '.3f')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
