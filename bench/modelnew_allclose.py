#!/usr/bin/env python3
"""A plain KernelBench-style check of a ModelNew file, independent of kfab: import the task file and
the ModelNew file, build Model and ModelNew from the same seed, compare their outputs with
torch.allclose on fresh inputs, and time both with CUDA events (mean of back-to-back calls, as
KernelBench does). Exits 0 when every trial is allclose.

  python3 bench/modelnew_allclose.py TASK.py MODELNEW.py [--device cuda] [--trials 5] [--atol 1e-4 --rtol 1e-4]
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time

import torch


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("task")
    p.add_argument("modelnew")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--atol", type=float, default=1e-4, help="KernelBench's fp32 default")
    p.add_argument("--rtol", type=float, default=1e-4, help="KernelBench's fp32 default")
    a = p.parse_args()
    task = load(a.task, "reference_task")
    new = load(a.modelnew, "candidate_modelnew")
    torch.manual_seed(42)
    ref = task.Model(*task.get_init_inputs()).to(a.device)
    torch.manual_seed(42)
    mn = new.ModelNew(*task.get_init_inputs()).to(a.device)
    ok = True
    with torch.no_grad():
        for trial in range(a.trials):
            torch.manual_seed(1000 + trial)
            x = [t.to(a.device) if isinstance(t, torch.Tensor) else t for t in task.get_inputs()]
            want, got = ref(*x), mn(*x)
            close = torch.allclose(got, want, atol=a.atol, rtol=a.rtol)
            ok = ok and close
            print(f"trial {trial}: allclose {close}, max abs diff {float((got - want).abs().max()):.3g}")
        if ok:
            times = {}
            for name, m in (("Model", ref), ("ModelNew", mn)):
                for _ in range(10):
                    m(*x)
                if a.device == "cuda":
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    torch.cuda.synchronize()
                    start.record()
                    for _ in range(100):
                        m(*x)
                    end.record()
                    torch.cuda.synchronize()
                    ms = start.elapsed_time(end) / 100
                else:
                    t0 = time.perf_counter()
                    for _ in range(100):
                        m(*x)
                    ms = (time.perf_counter() - t0) * 10
                times[name] = ms
                print(f"{name}: {ms:.4f} ms per call (mean of 100 back-to-back calls)")
            print(f"speedup (Model / ModelNew): {times['Model'] / times['ModelNew']:.3f}x")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
