#!/usr/bin/env python3
"""What one evaluation of a small CUDA candidate costs: kfab against torch's load_inline, in one run.

  python3 bench/cuda_overhead.py --out FILE [--kfab build-gpu/kfab]

Both sides do the same job for y = 2*x + 1 on f32 tensors: build the kernel, check it on the affine
shapes (64x256, 128x256, 33x1001) and time it on the device. Each trial is a whole fresh process,
timed from the outside (wall clock):

  kfab   `kfab eval tests/fixtures/tasks/affine .../good.cu --target cuda --json --quiet`
         cold: a fresh, empty KFAB_CACHE_DIR each time (5x); warm: the last cold cache again (5x).
         KFAB_DATA_DIR is a temporary folder. kfab's default protocol: 5 seeds on 3 shapes, then (CUDA)
         at least 100 calls and 0.05 s per tuning shape (CUDA graph replay for these µs kernels), L2 flushed and the context synchronized around
         each call; a cold cache also measures the device's copy bandwidth once (the roofline bound).
  torch  this script in a helper mode (--torch-trial) in its own python3 process: import torch,
         torch.utils.cpp_extension.load_inline (cuda_sources = kernel + launcher, cpp_sources = the
         declaration, functions=[...]), allclose against 2*x+1 on the three shapes, then 100 calls per
         tuning shape timed with CUDA events.
         cold: a fresh build_directory and a unique module name each time (3x); warm: the last cold
         name and build directory again, in a fresh process, so the module is not already imported (3x).

Prints a table (median and min of each; the ratio torch/kfab of the medians and of the minima, cold
and warm) and writes everything, every trial included, as JSON to --out. Exits non-zero, with the
failing command's output, if any trial fails; the JSON then says what failed and holds what ran.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASK = "tests/fixtures/tasks/affine"
CANDIDATE = "tests/fixtures/tasks/affine/candidates/good.cu"
SHAPES = [(64, 256), (128, 256), (33, 1001)]  # the affine task's tuning shapes, then its held-out shape
TUNE_SHAPES = SHAPES[:2]
TIMED_CALLS = 100
RESULT_TAG = "CUDA_OVERHEAD_RESULT "
KFAB_TIMEOUT_S = 600
TORCH_TIMEOUT_S = 1200

# The torch side of the comparison: the same kernel as good.cu (one thread per element), launched on
# torch's current stream, returning a new tensor the way a torch extension does.
CUDA_SOURCE = r"""
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

__global__ void affine_kernel(const float* x, float* y, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}

torch::Tensor affine(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "affine: x must be a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "affine: x must be float32");
  TORCH_CHECK(x.is_contiguous(), "affine: x must be contiguous");
  auto y = torch::empty_like(x);
  const int64_t n = x.numel();
  if (n > 0) {
    affine_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}
"""
CPP_SOURCE = "torch::Tensor affine(torch::Tensor x);"


class BenchError(RuntimeError):
    pass


def tail(text: str | bytes | None, lines: int = 40) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join(text.rstrip().splitlines()[-lines:])


# ----------------------------------------------------------------------------------------------
# Helper mode: one torch trial, in a process of its own.
# ----------------------------------------------------------------------------------------------

def torch_trial(name: str, build_dir: str, mode: str) -> dict:
    phases = {}
    t0 = time.perf_counter()
    import torch  # noqa: PLC0415 (imported here on purpose: the import is part of what is measured)
    from torch.utils.cpp_extension import load_inline  # noqa: PLC0415
    phases["import_s"] = time.perf_counter() - t0

    t = time.perf_counter()
    if not torch.cuda.is_available():
        raise BenchError("torch.cuda.is_available() is False: torch sees no GPU")
    torch.cuda.init()
    torch.empty(1, device="cuda")
    phases["cuda_init_s"] = time.perf_counter() - t

    libs_before = {p.name: p.stat().st_mtime_ns for p in Path(build_dir).glob("*.so")}
    t = time.perf_counter()
    module = load_inline(name=name, cpp_sources=[CPP_SOURCE], cuda_sources=[CUDA_SOURCE], functions=["affine"],
                         build_directory=build_dir, verbose=False)
    phases["compile_load_s"] = time.perf_counter() - t
    libs_after = {p.name: p.stat().st_mtime_ns for p in Path(build_dir).glob("*.so")}
    if not libs_after:
        raise BenchError(f"load_inline left no shared object in {build_dir}")
    rebuilt = libs_after != libs_before

    t = time.perf_counter()
    torch.manual_seed(0)
    checks = []
    for shape in SHAPES:
        x = torch.randn(shape, device="cuda", dtype=torch.float32)
        y = module.affine(x)
        torch.cuda.synchronize()
        want = 2.0 * x + 1.0
        ok = bool(torch.allclose(y, want, rtol=1e-6, atol=1e-6))
        checks.append({"shape": list(shape), "ok": ok, "max_abs_err": float((y - want).abs().max().item())})
        if not ok:
            raise BenchError(f"torch extension is wrong on shape {shape}: max abs error {checks[-1]['max_abs_err']}")
    phases["check_s"] = time.perf_counter() - t

    t = time.perf_counter()
    timing = []
    for shape in TUNE_SHAPES:
        x = torch.randn(shape, device="cuda", dtype=torch.float32)
        for _ in range(3):
            module.affine(x)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(TIMED_CALLS)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(TIMED_CALLS)]
        for s, e in zip(starts, ends):
            s.record()
            module.affine(x)
            e.record()
        torch.cuda.synchronize()
        ms = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        timing.append({"shape": list(shape), "calls": len(ms), "median_ms": statistics.median(ms), "min_ms": min(ms)})
    phases["time_s"] = time.perf_counter() - t
    phases["in_process_total_s"] = time.perf_counter() - t0

    return {"mode": mode, "name": name, "build_dir": build_dir, "rebuilt_library": rebuilt, "phases": phases,
            "checks": checks, "timing": timing, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0)}


def torch_preflight() -> dict:
    import torch  # noqa: PLC0415
    from torch.utils import cpp_extension  # noqa: PLC0415
    if not torch.cuda.is_available():
        raise BenchError("torch.cuda.is_available() is False: torch sees no GPU")
    if not cpp_extension.is_ninja_available():
        raise BenchError("ninja is not on PATH: torch's load_inline needs it (pip package 'ninja' or the ninja-build package)")
    if cpp_extension.CUDA_HOME is None:
        raise BenchError("torch found no CUDA toolkit (CUDA_HOME): load_inline cannot compile .cu sources")
    torch.empty(1, device="cuda")
    return {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "cuda_home": cpp_extension.CUDA_HOME,
            "gpu": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0))}


def helper_main(args: argparse.Namespace) -> int:
    try:
        if args.torch_preflight:
            result = torch_preflight()
        else:
            if not args.name or not args.build_dir:
                raise BenchError("--torch-trial needs --name and --build-dir")
            result = torch_trial(args.name, args.build_dir, args.mode)
    except Exception as e:  # noqa: BLE001 (the parent needs every failure as a message)
        print(f"torch helper ({'preflight' if args.torch_preflight else args.mode + ' trial'}) failed: "
              f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(RESULT_TAG + json.dumps(result), flush=True)
    return 0


# ----------------------------------------------------------------------------------------------
# Driver mode.
# ----------------------------------------------------------------------------------------------

def child_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    # torch's load_inline runs `ninja` from PATH; in a virtual environment it sits beside python3.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    if extra:
        env.update(extra)
    return env


def run_timed(argv: list[str], env: dict, timeout: float, what: str) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise BenchError(f"{what}: no answer after {timeout:.0f} s: {' '.join(argv)}\n{tail(e.stderr)}") from e
    except OSError as e:
        raise BenchError(f"{what}: cannot run {argv[0]}: {e}") from e
    return time.perf_counter() - start, proc


def kfab_trial(kfab: str, cache_dir: Path, data_dir: Path, pass_name: str, index: int) -> dict:
    argv = [kfab, "eval", TASK, CANDIDATE, "--target", "cuda", "--json", "--quiet"]
    env = child_env({"KFAB_CACHE_DIR": str(cache_dir), "KFAB_DATA_DIR": str(data_dir)})
    what = f"kfab {pass_name} trial {index + 1}"
    wall, proc = run_timed(argv, env, KFAB_TIMEOUT_S, what)
    try:
        verdict = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise BenchError(f"{what}: exit {proc.returncode}, stdout is not JSON:\n{tail(proc.stdout)}\n"
                         f"stderr:\n{tail(proc.stderr)}") from None
    if "error" in verdict:
        raise BenchError(f"{what}: exit {proc.returncode}: {verdict['error']} ({verdict.get('hint', '')})")
    disposition = verdict.get("disposition")
    if proc.returncode != 0 or disposition != "passed":
        raise BenchError(f"{what}: exit {proc.returncode}, disposition {disposition}: {verdict.get('detail', '')}\n"
                         f"stderr:\n{tail(proc.stderr)}")
    cached = (verdict.get("build") or {}).get("cached")
    if pass_name == "cold" and cached is not False:
        raise BenchError(f"{what}: build.cached is {cached} with an empty cache {cache_dir}: not a cold build")
    if pass_name == "warm" and cached is not True:
        raise BenchError(f"{what}: build.cached is {cached} with the cache of the cold runs: kfab rebuilt the candidate")
    return {"wall_s": wall, "kfab_wall_s": verdict.get("wall_s"), "build_cached": cached,
            "build_s": (verdict.get("build") or {}).get("seconds"),
            "machine_peaks_source": (verdict.get("machine") or {}).get("source"),
            "protocol": verdict.get("protocol"),
            "kernel_median_ms": [s["time_ms"]["median"] for s in verdict.get("shapes", [])
                                 if not s.get("heldout") and isinstance(s.get("time_ms"), dict)],
            "cache_dir": str(cache_dir)}


def torch_child(python: str, extra_args: list[str], what: str) -> tuple[float, dict]:
    argv = [python, str(Path(__file__).resolve())] + extra_args
    wall, proc = run_timed(argv, child_env(), TORCH_TIMEOUT_S, what)
    results = [line[len(RESULT_TAG):] for line in proc.stdout.splitlines() if line.startswith(RESULT_TAG)]
    if proc.returncode != 0 or len(results) != 1:
        raise BenchError(f"{what}: exit {proc.returncode}\nstderr:\n{tail(proc.stderr)}\nstdout:\n{tail(proc.stdout, 10)}")
    return wall, json.loads(results[0])


def num(v) -> str:
    return f"{v:.2f}" if isinstance(v, (int, float)) else "?"


def summarize(walls: list[float]) -> dict:
    return {"n": len(walls), "median_s": statistics.median(walls), "min_s": min(walls), "max_s": max(walls)}


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def driver_main(args: argparse.Namespace) -> int:
    if not args.out:
        print("cuda_overhead.py: --out FILE is required", file=sys.stderr)
        return 2
    kfab = Path(args.kfab)
    if not kfab.is_absolute():
        # Relative to the current folder when it is there, else to the repository.
        kfab = kfab.resolve() if kfab.exists() else ROOT / kfab
    out = Path(args.out).resolve()
    report: dict = {"status": "running", "kfab_path": str(kfab), "python": args.python,
                    "task": TASK, "candidate": CANDIDATE,
                    "kfab": {"command": [str(kfab), "eval", TASK, CANDIDATE, "--target", "cuda", "--json", "--quiet"],
                             "cold": [], "warm": []},
                    "torch": {"shapes_checked": [list(s) for s in SHAPES], "shapes_timed": [list(s) for s in TUNE_SHAPES],
                              "calls_timed_per_shape": TIMED_CALLS, "cold": [], "warm": []}}
    scratch = Path(tempfile.mkdtemp(prefix="kfab-cuda-overhead-"))

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")

    try:
        if not (kfab.is_file() and os.access(kfab, os.X_OK)):
            raise BenchError(f"kfab not found or not executable at {kfab} (build it, or pass --kfab PATH)")
        for rel in (TASK + "/task.toml", CANDIDATE):
            if not (ROOT / rel).is_file():
                raise BenchError(f"missing {ROOT / rel}")

        print("preflight: torch, CUDA, ninja, nvcc ...", flush=True)
        _, report["torch"]["environment"] = torch_child(args.python, ["--torch-preflight"], "torch preflight")
        env = report["torch"]["environment"]
        print(f"  {env['gpu']}, torch {env['torch']} (CUDA {env['torch_cuda']}), CUDA_HOME {env['cuda_home']}")
        # One discarded kfab run first, so that neither side's first trial pays for a cold page cache
        # of nvcc and the runtime alone.
        print("warm-up: one discarded kfab run", flush=True)
        (scratch / "warmup" / "cache").mkdir(parents=True)
        (scratch / "warmup" / "data").mkdir(parents=True)
        kfab_trial(str(kfab), scratch / "warmup" / "cache", scratch / "warmup" / "data", "cold", 0)

        for pass_name, count in (("cold", args.kfab_runs), ("warm", args.kfab_runs)):
            for i in range(count):
                if pass_name == "cold":
                    cache = scratch / f"kfab-cold-{i}" / "cache"
                    data = scratch / f"kfab-cold-{i}" / "data"
                    cache.mkdir(parents=True)  # fresh and empty
                    data.mkdir(parents=True)
                    last_cold_cache, last_cold_data = cache, data
                else:
                    cache, data = last_cold_cache, last_cold_data
                r = kfab_trial(str(kfab), cache, data, pass_name, i)
                report["kfab"][pass_name].append(r)
                print(f"kfab  {pass_name} {i + 1}/{count}: {r['wall_s']:7.2f} s  (kfab's wall_s {num(r['kfab_wall_s'])}, "
                      f"build {num(r['build_s'])} s, cached {r['build_cached']})", flush=True)
                save()

        for pass_name, count in (("cold", args.torch_runs), ("warm", args.torch_runs)):
            for i in range(count):
                if pass_name == "cold":
                    name = f"kfab_bench_affine_{os.getpid()}_{i}_{uuid.uuid4().hex[:8]}"
                    build_dir = scratch / f"torch-cold-{i}"
                    build_dir.mkdir()
                    last_name, last_dir = name, build_dir
                else:
                    name, build_dir = last_name, last_dir
                wall, r = torch_child(args.python, ["--torch-trial", "--mode", pass_name, "--name", name,
                                                    "--build-dir", str(build_dir)], f"torch {pass_name} trial {i + 1}")
                r["wall_s"] = wall
                report["torch"][pass_name].append(r)
                p = r["phases"]
                note = ""
                if pass_name == "warm" and r["rebuilt_library"]:
                    note = "  WARNING: the library was rebuilt: not a warm load"
                elif pass_name == "cold" and not r["rebuilt_library"]:
                    raise BenchError(f"torch cold trial {i + 1}: load_inline built nothing in the fresh {build_dir}")
                print(f"torch {pass_name} {i + 1}/{count}: {wall:7.2f} s  (import {p['import_s']:.2f}, cuda init "
                      f"{p['cuda_init_s']:.2f}, compile+load {p['compile_load_s']:.2f}, check {p['check_s']:.2f}, "
                      f"time {p['time_s']:.2f}){note}", flush=True)
                save()
    except BenchError as e:
        report["status"] = "failed"
        report["error"] = str(e)
        save()
        print(f"\ncuda_overhead.py: FAILED: {e}\n(partial results in {out})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        report["status"] = "interrupted"
        save()
        print(f"\ncuda_overhead.py: interrupted (partial results in {out})", file=sys.stderr)
        return 130
    finally:
        if args.keep:
            print(f"scratch folders kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)

    summary = {}
    for side in ("kfab", "torch"):
        for pass_name in ("cold", "warm"):
            summary[(side, pass_name)] = summarize([r["wall_s"] for r in report[side][pass_name]])
            report[side][f"{pass_name}_summary"] = summary[(side, pass_name)]
    report["ratio_torch_over_kfab"] = {
        p: {"median": ratio(summary[("torch", p)]["median_s"], summary[("kfab", p)]["median_s"]),
            "min": ratio(summary[("torch", p)]["min_s"], summary[("kfab", p)]["min_s"])}
        for p in ("cold", "warm")}
    report["status"] = "ok"
    save()

    print()
    print("wall time of one evaluation (a whole fresh process each), seconds")
    print(f"{'':14}{'runs':>5}{'median':>10}{'min':>10}{'max':>10}")
    for (side, pass_name), s in summary.items():
        print(f"{side + ' ' + pass_name:14}{s['n']:>5}{s['median_s']:>10.2f}{s['min_s']:>10.2f}{s['max_s']:>10.2f}")
    for p in ("cold", "warm"):
        rr = report["ratio_torch_over_kfab"][p]
        print(f"torch / kfab, {p}: {rr['median']:.2f}x (medians), {rr['min']:.2f}x (minima)")
    kk = [m for r in report["kfab"]["warm"] for m in r["kernel_median_ms"]]
    tt = [t["median_ms"] for r in report["torch"]["warm"] for t in r["timing"]]
    if kk and tt:
        print(f"kernel time, for reference (different protocols): kfab median {statistics.median(kk) * 1e3:.1f} us "
              f"(L2 flushed, synchronized per call), torch median {statistics.median(tt) * 1e3:.1f} us (back-to-back calls)")
    warm_rebuilt = sum(1 for r in report["torch"]["warm"] if r["rebuilt_library"])
    if warm_rebuilt:
        print(f"WARNING: {warm_rebuilt} torch warm trial(s) rebuilt the library")
    print(f"JSON: {out}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kfab", default="build-gpu/kfab", help="the kfab executable (default build-gpu/kfab, relative to the repository)")
    ap.add_argument("--out", help="where to write the JSON results (required)")
    ap.add_argument("--python", default=sys.executable, help="python3 with torch for the torch trials (default: this one)")
    ap.add_argument("--kfab-runs", type=int, default=5, help="kfab trials per pass (default 5)")
    ap.add_argument("--torch-runs", type=int, default=3, help="torch trials per pass (default 3)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folders (caches, build directories)")
    # Helper modes, used by the driver itself.
    ap.add_argument("--torch-trial", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--torch-preflight", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="cold", choices=["cold", "warm"], help=argparse.SUPPRESS)
    ap.add_argument("--name", help=argparse.SUPPRESS)
    ap.add_argument("--build-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_trial or args.torch_preflight:
        return helper_main(args)
    if args.kfab_runs < 1 or args.torch_runs < 1:
        ap.error("--kfab-runs and --torch-runs must be at least 1")
    return driver_main(args)


if __name__ == "__main__":
    sys.exit(main())
