#!/usr/bin/env python3
"""One line per tuning shape of every verdict in a file of `kfab eval --json` outputs, one after the
other: the candidate's median, its bandwidth and its share of the measured copy
bandwidth, the speedup over the baseline, and whether the call was replayed as a CUDA graph.

  python3 bench/eval_table.py VERDICTS.json

A verdict that did not pass is one line with its disposition and detail. Only the last verdict of
each (task, candidate) pair is shown: scripts/gpu_machine.sh evaluates each one twice (cold, warm).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def objects(text: str, name: str = "input"):
    """The JSON values of `text`, one after the other (pretty-printed ones included)."""
    decoder, pos = json.JSONDecoder(), 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return
        try:
            v, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            print(f"{name}: stops at a part that is not JSON ({e})", file=sys.stderr)
            return
        yield v


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    last: dict[tuple[str, str], dict] = {}
    for v in objects(Path(sys.argv[1]).read_text(), sys.argv[1]):
        last[(v.get("task", "?"), Path(v.get("candidate", "?")).name)] = v
    header = f"{'task':18} {'candidate':30} {'shape':24} {'median us':>10} {'GB/s':>8} {'% copy':>7} {'speedup':>8} replay"
    print(header)
    print("-" * len(header))
    for (task, cand), v in sorted(last.items()):
        if v.get("disposition") != "passed":
            print(f"{task:18} {cand:30} {v.get('disposition', '?')}: {v.get('detail', '')[:120]}")
            continue
        for s in v.get("shapes", []):
            if s.get("heldout") or "time_ms" not in s:
                continue
            shape = ",".join(f"{k}={x}" for k, x in s["shape"].items())
            med_us = s["time_ms"]["median"] * 1e3
            gbps = s.get("achieved_GBps")
            pct = s.get("percent_of_copy_bandwidth")
            speed = s["baseline_ms"]["median"] / s["time_ms"]["median"] if "baseline_ms" in s else None
            replay = s.get("replay", {}).get("used")
            print(f"{task:18} {cand:30} {shape:24} {med_us:10.2f} "
                  f"{gbps if gbps is not None else float('nan'):8.1f} {pct if pct is not None else float('nan'):7.1f} "
                  f"{speed if speed is not None else float('nan'):8.2f} {'yes' if replay else 'no' if replay is not None else '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
