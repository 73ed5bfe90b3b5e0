#!/usr/bin/env python3
"""Benches of one suite side by side (issue 26): the verdict of each task in each bench, and each
bench's wall time, evaluations and evaluations per hour.

    python3 bench/devices_compare.py LABEL=BENCH_DIR [LABEL=BENCH_DIR ...]

An evaluation is a step of a task's run (a tuner point, a final check, a bundled candidate). Exit 1
when the benches disagree on a task's disposition or do not hold the same tasks."""
from __future__ import annotations

import json
import sys
from pathlib import Path


def load(arg: str) -> tuple[str, dict]:
    label, _, path = arg.partition("=")
    if not path:
        sys.exit(f"usage: {sys.argv[0]} LABEL=BENCH_DIR ...")
    p = Path(path)
    return label, json.loads((p / "bench.json" if p.is_dir() else p).read_text())


def evaluations(row: dict) -> int:
    rep = row.get("report")
    return len(rep.get("steps", [])) if isinstance(rep, dict) else 0


def main() -> int:
    benches = [load(a) for a in sys.argv[1:]]
    if not benches:
        sys.exit(f"usage: {sys.argv[0]} LABEL=BENCH_DIR ...")
    rows = {label: {r["path"]: r for r in b["tasks"]} for label, b in benches}
    paths = list(rows[benches[0][0]])
    same = all(set(r) == set(paths) for r in rows.values())
    differ = 0
    print("| task | " + " | ".join(label for label, _ in benches) + " |")
    print("|---|" + "---|" * len(benches))
    for p in paths:
        cells = []
        seen = set()
        for label, _ in benches:
            r = rows[label].get(p)
            if r is None:
                cells.append("-")
                continue
            seen.add(r["disposition"])
            dev = f" (device {r['device']})" if "device" in r else ""
            sp = f" {r['speedup']:.2f}x" if isinstance(r.get("speedup"), (int, float)) else ""
            cells.append(f"{r['disposition']}{sp}{dev}")
        differ += len(seen) > 1
        print(f"| {Path(p).stem} | " + " | ".join(cells) + " |")
    print()
    print("| bench | devices | tasks | wall s | evaluations | evaluations per hour |")
    print("|---|---|---|---|---|---|")
    for label, b in benches:
        n = sum(evaluations(r) for r in b["tasks"])
        wall = float(b.get("wall_s", 0.0))
        rate = n / wall * 3600 if wall > 0 else 0.0
        where = b.get("devices") or (f"queue {b['queue']['name']}, workers " + ", ".join(sorted({str(r.get('worker')) for r in b["tasks"]}))
                                     if isinstance(b.get("queue"), dict) else "one process")
        print(f"| {label} | {where} | {len(b['tasks'])} | {wall:.0f} | {n} | {rate:.0f} |")
    print()
    print(f"dispositions: {'the same for every task' if not differ and same else f'{differ} tasks differ'}"
          f"{'' if same else '; the benches do not hold the same tasks'}")
    return 0 if same and not differ else 1


if __name__ == "__main__":
    sys.exit(main())
