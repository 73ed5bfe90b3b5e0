#!/usr/bin/env python3
"""A table of built-in tuner runs: one line per task from a file of `kfab optimize TASK --json`
outputs (one after the other), with the winning parameter point, its speedup over the baseline
(the bundled CUDA reference, or torch eager for a KernelBench task), over torch.compile where timed,
its share of the measured copy bandwidth at the tuning shapes, whether the held-out shapes passed
and, where the final timing recorded them, the SM clock range and NVML's reasons for holding it down.
The geometric means close the table.

  python3 bench/tune_table.py TUNE.jsonl [--points]

--points also lists every parameter point of each search: its speedup and share of copy bandwidth.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

from eval_table import objects  # bench/ is the script's folder, first on sys.path


def gmean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--points"]
    points = "--points" in sys.argv[1:]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    sys.argv[1] = args[0]
    rows, sp_core, sp_kb, sp_compile, copy = [], [], [], [], []
    for r in objects(Path(sys.argv[1]).read_text(), sys.argv[1]):
        v = r.get("verdict") or {}
        task = Path(v.get("task_path", v.get("task", "?"))).name if v else "?"
        task = v.get("task", task)
        kb = str(r.get("tuner", {}).get("program", "")) != ""
        if points:
            for p in r.get("points", []):
                prm = ", ".join(f"{k}={x}" for k, x in p.get("params", {}).items())
                sp = p.get("speedup")
                pc = "/".join("%.1f" % c for c in p.get("percent_of_copy_bandwidth", []))
                wall = f"{p['wall_s']:.1f} s" if isinstance(p.get("wall_s"), (int, float)) else ""
                rows.append(f"  {p.get('template', '?')} ({prm}): {p.get('disposition')} "
                            f"{('%.2fx' % sp) if sp else ''} {pc} {wall} {p.get('detail', '')[:100]}")
        if r.get("best", {}).get("disposition") != "passed":
            rows.append(f"{task:26} {r.get('best', {}).get('disposition', '?')}: {str(r.get('best', {}).get('detail', r.get('error', '')))[:140]}")
            continue
        shapes = [s for s in v.get("shapes", []) if not s.get("heldout") and "time_ms" in s]
        held = [s for s in v.get("shapes", []) if s.get("heldout")]
        pct = [s.get("percent_of_copy_bandwidth") for s in shapes if s.get("percent_of_copy_bandwidth") is not None]
        spc = v.get("speedup_vs_compile")
        sp = v.get("speedup")
        (sp_kb if kb else sp_core).append(sp)
        if spc:
            sp_compile.append(spc)
        copy += pct
        params = ", ".join(f"{k}={x}" for k, x in r.get("tuner", {}).get("params", {}).items() if k != "kernel")
        clk = [s["clocks"] for s in shapes if s.get("clocks", {}).get("recorded")]
        clk_text = "  SM " + "/".join(f"{c['sm_mhz_min']}-{c['sm_mhz_max']} MHz ({c['reasons']})" for c in clk) if clk else ""
        rows.append(f"{task:26} {sp:7.2f}x {('%.2fx' % spc) if spc else '   -':>8} "
                    f"{'/'.join('%.1f' % p for p in pct) or '-':>12} {len(held):>3} ok  {params}{clk_text}")
    print(f"{'task':26} {'vs base':>8} {'vs comp':>8} {'% copy':>12} {'held':>6}  point")
    for line in rows:
        print(line)
    print(f"geomean: native vs CUDA reference {gmean(sp_core):.2f}x ({len(sp_core)}); KernelBench vs eager "
          f"{gmean(sp_kb):.2f}x ({len(sp_kb)}), vs torch.compile {gmean(sp_compile):.2f}x ({len(sp_compile)}); "
          f"lowest copy share {min(copy) if copy else float('nan'):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
