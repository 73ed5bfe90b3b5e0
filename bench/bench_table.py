#!/usr/bin/env python3
"""A bench's rows as a Markdown table for bench/results/: problem, result, speedup over torch eager and
torch.compile, peak device memory, wall time, and the reason of every row that did not pass.

  python3 bench/bench_table.py BENCH_DIR/bench.json [--kernelbench COMMIT]
"""
from __future__ import annotations

import argparse
import json
import sys


def num(v, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) else "-"


def read_bench(doc: str | None = None) -> tuple[dict, str]:
    """The bench.json named on the command line and the --kernelbench commit (bench/matmul_table.py too)."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("bench_json")
    ap.add_argument("--kernelbench", default="", help="the KernelBench commit the problems came from")
    a = ap.parse_args()
    return json.load(open(a.bench_json)), a.kernelbench


def print_title(b: dict, kernelbench: str) -> None:
    """The table's title: the bench, its suite and target, the KernelBench commit and the device."""
    print(f"# kfab bench {b.get('bench')}: {b.get('suite')} on {b.get('target')} ({b.get('mode')}, {b.get('llm')})\n")
    if kernelbench:
        print(f"KernelBench commit {kernelbench}, problem files unmodified.  ")
    print(f"Device: {b.get('device')}  ")


def main() -> int:
    b, kernelbench = read_bench()
    rows = b.get("tasks", [])
    print_title(b, kernelbench)
    print(f"Started {b.get('started_at')}, resumed {len(b.get('resumed_at', []))} times, {b.get('wall_s', 0):.0f} s in all; "
          f"finished: {b.get('finished')}; {len(rows)} rows.\n")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.get("disposition", "?")] = counts.get(r.get("disposition", "?"), 0) + 1
    print("Rows by result: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + "\n")
    print("x eager is the kernel's speedup (the candidate's call); end to end, the exported ModelNew's forward.\n")
    print("| problem | result | x eager | x eager, end to end | x compile | peak device GiB | wall s | reason |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        reason = "" if r.get("disposition") == "passed" else (r.get("error") or r.get("detail") or "")
        reason = reason.replace("|", "\\|").replace("\n", " ")[:160]
        mem = r.get("peak_device_bytes")
        print(f"| {r.get('path', '').rsplit('/', 1)[-1]} | {r.get('disposition')} | {num(r.get('speedup'), '.3f')} | "
              f"{num(r.get('speedup_end_to_end'), '.3f')} | "
              f"{num(r.get('speedup_vs_compile'), '.3f')} | {num(mem / 2**30 if mem else None, '.1f')} | "
              f"{num(r.get('wall_s'), '.0f')} | {reason} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
