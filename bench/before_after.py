#!/usr/bin/env python3
"""Two benches of one suite side by side (scripts/before_after.sh): each task's disposition and
speedup before and after, their ratio, and the geometric means over the tasks that passed in both.

    bench/before_after.py BEFORE/bench.json AFTER/bench.json
"""
import json
import math
import sys


def rows(path):
    with open(path) as f:
        b = json.load(f)
    return {r.get("task", r.get("path")): r for r in b.get("tasks", [])}, b


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    before, bb = rows(sys.argv[1])
    after, ba = rows(sys.argv[2])
    print(f"# {bb.get('suite')} on {bb.get('target')}: before {sys.argv[1]}, after {sys.argv[2]}")
    print(f"{'task':44s} {'before':>18s} {'after':>18s} {'after/before':>12s}")
    logs, same = [], 0
    for task in sorted(set(before) | set(after)):
        b, a = before.get(task, {}), after.get(task, {})
        def cell(r):
            s = r.get("speedup")
            return f"{r.get('disposition', '-')} {s:.3f}x" if isinstance(s, (int, float)) else r.get("disposition", "-")
        ratio = ""
        sb, sa = b.get("speedup"), a.get("speedup")
        if b.get("disposition") == "passed" and a.get("disposition") == "passed" and sb and sa:
            logs.append(math.log(sa / sb))
            ratio = f"{sa / sb:.3f}"
        same += b.get("disposition") == a.get("disposition")
        print(f"{str(task)[:44]:44s} {cell(b):>18s} {cell(a):>18s} {ratio:>12s}")
    n = len(set(before) | set(after))
    if logs:
        print(f"geometric mean of after/before over {len(logs)} tasks passed in both: {math.exp(sum(logs) / len(logs)):.3f} "
              f"(min {math.exp(min(logs)):.3f}, max {math.exp(max(logs)):.3f}); same disposition on {same} of {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
