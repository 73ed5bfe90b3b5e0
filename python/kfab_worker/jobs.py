"""The worker's jobs: hello, describe, verify, time, check (docs/runner-protocol.md, "Python worker")."""
from __future__ import annotations

import os
import random
import time
import traceback

import torch

from . import PROTOCOL
from . import candidate as candmod
from . import clocks as clockmod
from . import guard
from . import hold as holdmod
from . import task as taskmod
from . import trace as tracemod
from .compare import Stats, compare

# The reference is true fp32: TF32 convolutions (cuDNN's default) would fail honest fp32 candidates.
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False

# Taken before any candidate is loaded: see guard.Integrity. Filled in at the end of this module, once
# every harness function exists.
_integrity: guard.Integrity | None = None

_tasks: dict[str, taskmod.KbTask] = {}
_candidates: dict[str, candmod.Candidate] = {}


class JobFailure(Exception):
    def __init__(self, kind: str, detail: str, fatal: bool = False, evidence: dict | None = None):
        super().__init__(detail)
        self.kind, self.detail, self.fatal, self.evidence = kind, detail, fatal, evidence


def _task(req) -> taskmod.KbTask:
    path = req["task"]
    if path not in _tasks:
        try:
            _tasks[path] = taskmod.KbTask(path)
        except taskmod.TaskError as e:
            raise JobFailure("task_error", str(e)) from e
        except OSError as e:
            raise JobFailure("task_error", f"{path}: {e}") from e
    return _tasks[path]


def _device(req) -> str:
    d = req.get("target", "cpu")
    if d == "cuda":
        if not torch.cuda.is_available():
            raise JobFailure("device_error", "torch sees no CUDA device (torch.cuda.is_available() is False)")
        return "cuda"
    if d != "cpu":
        raise JobFailure("protocol_error", f"the Python worker runs on cpu or cuda, not {d}")
    return "cpu"


def _dtype(req) -> torch.dtype:
    name = req.get("dtype", "f32")
    if name not in taskmod.DTYPES:
        raise JobFailure("protocol_error", f"dtype {name} is not one of {', '.join(taskmod.DTYPES)}")
    return taskmod.DTYPES[name]


def _where(e: BaseException, path: str | None) -> str:
    """The last frame of the traceback inside the candidate's file, if any."""
    if not path:
        return ""
    for fr in reversed(traceback.extract_tb(e.__traceback__)):
        if fr.filename == path:
            return f" (at {path.rsplit('/', 1)[-1]}:{fr.lineno})"
    return ""


def _call_failure(e: BaseException, who: str, path: str | None) -> JobFailure:
    text = f"{type(e).__name__}: {e}".strip()
    if isinstance(e, candmod.CandidateError):
        return JobFailure(e.kind, e.detail)
    if isinstance(e, torch.cuda.OutOfMemoryError) or isinstance(e, MemoryError):
        return JobFailure("crashed", f"{who} ran out of memory: {text[:400]}")
    if "CUDA error" in text or "cudaError" in text or "illegal memory access" in text:
        # A kernel fault loses the CUDA context: this worker cannot go on, kfab replaces it.
        return JobFailure("crashed", f"{who}: {text.splitlines()[0][:400]}", fatal=True)
    return JobFailure("runtime_failed", f"{who} raised {text.splitlines()[0][:400]}{_where(e, path)}")


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _candidate(req, task: taskmod.KbTask, device: str) -> candmod.Candidate:
    c = req["candidate"]
    path = c["path"]
    forbidden = task.forbidden + list(req.get("forbidden", []))
    if not path.endswith(".so"):
        try:
            source = open(path).read()
        except OSError as e:
            raise JobFailure("compile_failed", f"{path}: {e}") from e
        why = guard.static_check(source, path.rsplit("/", 1)[-1], forbidden)
        if why:
            raise JobFailure("rejected", why)
    key = f"{path}|{device}"
    if key not in _candidates:
        try:
            _candidates[key] = candmod.load(path, task, device)
        except candmod.CandidateError as e:
            raise JobFailure(e.kind, e.detail) from e
        except Exception as e:  # noqa: BLE001 - a candidate module that fails to import
            raise JobFailure("compile_failed", f"importing the candidate raised {type(e).__name__}: {e}{_where(e, path)}") from e
        _tampered()
    return _candidates[key]


def _tampered(quick: bool = False) -> None:
    """Rejects a candidate that replaced a timer or a harness function (guard.Integrity)."""
    if _integrity is None:
        return
    why = _integrity.quick() if quick else _integrity.full()
    if why:
        raise JobFailure("rejected", f"the candidate {why}")


def _poison(outs: list, pattern: int) -> None:
    for o in outs:
        if o.is_floating_point():
            o.fill_(float("nan"))
        elif o.dtype == torch.bool:
            o.fill_(bool(pattern & 1))
        else:
            o.fill_(pattern if o.dtype != torch.int8 else pattern - 256 if pattern > 127 else pattern)


def _reference(model, inputs, device):
    with torch.no_grad():
        out = taskmod.as_list(model(*inputs))
    _sync(device)
    return [o.detach().clone() if isinstance(o, torch.Tensor) else o for o in out]


class _Setup:
    """Task, model, candidate and the reference's outputs for one shape."""

    def __init__(self, req):
        self.task = _task(req)
        self.device = _device(req)
        self.dtype = _dtype(req)
        self.shape = dict(req.get("shape", {}))
        try:
            self.model = self.task.model(self.shape, self.device, self.dtype)
        except taskmod.TaskError as e:
            raise JobFailure("task_error", str(e)) from e
        self.cand = _candidate(req, self.task, self.device)
        self.path = req["candidate"]["path"]
        try:
            self.cand.setup(self.model, self.device, self.dtype)
            self.cand.init(self.task.init_scalars(self.shape))
        except candmod.CandidateError as e:
            raise JobFailure(e.kind, e.detail) from e
        except taskmod.TaskError as e:
            raise JobFailure("task_error", str(e)) from e
        self.watch = guard.Watch(self.task.forbidden + list(req.get("forbidden", [])))
        self.atol, self.rtol = self.task.tol(self.dtype)
        self.calls = 0

    def inputs(self, seed: int, index: int):
        scale = self.task.scale_for(index)
        try:
            xs = self.task.inputs(self.shape, seed, self.device, self.dtype, scale)
            ref = _reference(self.model, xs, self.device)
            if scale != 1.0 and any(isinstance(r, torch.Tensor) and r.is_floating_point() and not torch.isfinite(r).all()
                                    for r in ref):
                self.task.reject_scale(scale)
                xs = self.task.inputs(self.shape, seed, self.device, self.dtype, 1.0)
                ref = _reference(self.model, xs, self.device)
        except taskmod.TaskError as e:
            raise JobFailure("task_error", str(e)) from e
        except Exception as e:  # noqa: BLE001
            raise JobFailure("reference_failed", f"the task's Model raised {type(e).__name__}: {e}") from e
        return xs, ref

    def call(self, xs, ref, pattern: int, check_threads: bool):
        """One candidate call on fresh (poisoned) outputs; returns its outputs."""
        outs = None
        if self.cand.preallocated:
            outs = [torch.empty_like(r) for r in ref]
            _poison(outs, pattern)
        try:
            result, why = self.watch.call(lambda: self.cand(xs, outs), check_threads)
            _sync(self.device)
        except JobFailure:
            raise
        except BaseException as e:  # noqa: BLE001 - anything a candidate raises is its failure
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise JobFailure("crashed", f"the candidate raised {type(e).__name__}") from e
            raise _call_failure(e, "the candidate", self.path) from e
        self.calls += 1
        if why:
            raise JobFailure("rejected", why)
        _tampered()
        return result


def hello(req) -> dict:
    j = {"ok": True, "protocol": PROTOCOL, "worker": "python", "torch": torch.__version__,
         "cuda": torch.cuda.is_available(), "timer": TIMER_VERSION}
    if torch.cuda.is_available():
        j["device"] = torch.cuda.get_device_name(0)
    try:
        import triton  # noqa: PLC0415

        j["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        j["triton"] = None
    return j


def describe(req) -> dict:
    t = _task(req)
    d = t.describe()
    d["ok"] = True
    d["reference_params"] = []
    return d


def verify(req) -> dict:
    s = _Setup(req)
    base_seed = int(req.get("base_seed", 0))
    stats = None
    names = None
    for index, seed in enumerate(req.get("seeds", [0])):
        xs, ref = s.inputs(base_seed * 1000003 + int(seed), index)
        names = names or [f"output{i}" if len(ref) > 1 else "output" for i in range(len(ref))]
        stats = stats or [Stats() for _ in ref]
        snapshot = [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]
        first = s.call(xs, ref, 0x5a, check_threads=s.calls > 0)
        first = [o.clone() if isinstance(o, torch.Tensor) else o for o in first]
        for i, (x, y) in enumerate(zip(xs, snapshot)):
            if isinstance(x, torch.Tensor) and not torch.equal(x, y) and not (x.is_floating_point() and torch.equal(x.isnan(), y.isnan()) and torch.equal(x.nan_to_num(), y.nan_to_num())):
                raise JobFailure("rejected", f"input {i} was modified by the candidate")
        ref2 = _reference(s.model, xs, s.device)  # the reference after the candidate: stale-memory tricks show
        second = s.call(xs, ref2, 0xa5, check_threads=True)
        if len(first) != len(ref) or len(second) != len(ref):
            raise JobFailure("incorrect", f"the candidate returned {len(second)} outputs, the reference {len(ref)}")
        for i, r in enumerate(ref):
            compare(first[i], r, s.atol, s.rtol, names[i], int(seed), 1, stats[i])
            compare(second[i], r, s.atol, s.rtol, names[i], int(seed), 2, stats[i])
    total = Stats()
    outputs = []
    for i, st in enumerate(stats or []):
        o = st.to_json()
        o["name"] = names[i]
        outputs.append(o)
        total.max_abs = max(total.max_abs, st.max_abs)
        total.max_rel = max(total.max_rel, st.max_rel)
        total.checked += st.checked
        total.mismatches += st.mismatches
        total.nonfinite += st.nonfinite
        total.first = total.first or st.first
        total.problem = total.problem or st.problem
    r = total.to_json()
    r.update({"ok": True, "correct": total.ok(), "outputs": outputs, "shape": s.task.shape_symbols(s.shape),
              "calls": s.calls})
    return r


def _quantile(s: list[float], q: float) -> float:
    if not s:
        return 0.0
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(v: list[float]) -> dict:
    s = sorted(v)
    if not s:
        return {"median": 0.0, "iqr": 0.0, "q1": 0.0, "q3": 0.0, "min": 0.0, "mean": 0.0, "n": 0}
    q1, q3 = _quantile(s, 0.25), _quantile(s, 0.75)
    return {"median": _quantile(s, 0.5), "iqr": q3 - q1, "q1": q1, "q3": q3, "min": s[0], "mean": sum(s) / len(s),
            "n": len(s)}


# The GPU timer's method; a torch.compile time cached under another one is measured again.
# KFAB_LAUNCH_HOLD=0 gives version 1 (no hold kernel, the span between the events alone), to compare.
_HOLD = os.environ.get("KFAB_LAUNCH_HOLD", "1") != "0"
TIMER_VERSION = 2 if _HOLD else 1


class _Timer:
    """GPU: a hold kernel that fills the device (hold.py), then a read of twice the L2, then CUDA
    events around the call and a device-wide sync; the wall clock around it all is kept too, less the
    hold. The hold keeps the device busy while the host issues the flush, the start event and the call,
    so that the device goes from the flush straight into the call: without it, a call whose host side
    (Python, ctypes, torch's dispatch) takes longer than the flush has the device's idle wait for its
    launch timed. A call's time is the span between the events; the candidate's is the longer of that
    span and the host's time to issue the call, so that work done on the host behind the hold is
    counted (the baselines' host times are reported, not counted: that can only understate a speedup).
    The hold is sized from the warm-up calls' host times and grows when a call is issued after the
    device reached its start event anyway (a late start). CPU: perf_counter around the call (no cache
    flush: the worker cannot evict lines from Python; said in the verdict)."""

    MAX_HOLD_MS = 2.0

    def __init__(self, device: str):
        self.device = device
        self.hold_ms = 0.0
        self.hold_cycles = 0
        self.hold_why = ""
        if device == "cuda":
            l2 = torch.cuda.get_device_properties(0).L2_cache_size or (50 << 20)
            self.flush_buf = torch.ones(2 * l2 // 4, dtype=torch.float32, device="cuda")
            self.sink = torch.empty((), dtype=torch.float32, device="cuda")
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)
            self.cycles_per_ms = 0.0
            self.hold = None

    def set_hold(self, host_ms: float) -> None:
        """A hold long enough for a call whose host side takes host_ms, and for the flush's and the
        events' own issuing (at most MAX_HOLD_MS)."""
        if self.device != "cuda" or not _HOLD:
            return
        if self.hold is None:
            self.hold = holdmod.HoldKernel()
            if not self.hold.ok:
                self.hold_why = self.hold.why
                return
            # How many SM clock cycles make a millisecond here
            torch.cuda.synchronize()
            self.start.record()
            self.hold(2_000_000)
            self.end.record()
            torch.cuda.synchronize()
            ms = self.start.elapsed_time(self.end)
            self.cycles_per_ms = 2_000_000 / ms if ms > 0 else 2.0e6
        if not self.hold.ok:
            return
        self.hold_ms = min(self.MAX_HOLD_MS, max(0.05, 2.0 * host_ms + 0.05))
        self.hold_cycles = int(self.hold_ms * self.cycles_per_ms)

    def __call__(self, fn, before=None, host_counts: bool = False) -> tuple[float, float, float, bool]:
        """(time ms, wall ms, host ms, late). time is the span between the events, or with host_counts
        the longer of it and the host's time to issue the call; wall is less the hold; late: the device
        reached the start event before the host had issued the call (the span may hold an idle wait;
        the hold grows for the next calls). `before` (poisoning the outputs) runs first, untimed."""
        if before is not None:
            before()
        if self.device != "cuda":
            t0 = time.perf_counter()
            fn()
            ms = (time.perf_counter() - t0) * 1e3
            return ms, 0.0, ms, False
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        hold_ms = self.hold_ms
        if self.hold_cycles:
            self.hold(self.hold_cycles)
        torch.sum(self.flush_buf, dim=0, out=self.sink)
        self.start.record()
        h0 = time.perf_counter()
        fn()
        host = (time.perf_counter() - h0) * 1e3
        self.end.record()
        late = self.start.query()
        torch.cuda.synchronize()
        wall = max(0.0, (time.perf_counter() - t0) * 1e3 - hold_ms)
        span = self.start.elapsed_time(self.end)
        if late and self.hold_cycles:
            self.set_hold(max(host, 0.75 * self.hold_ms))
        return (max(span, host) if host_counts and _HOLD else span), wall, host, late


def time_job(req) -> dict:
    s = _Setup(req)
    xs, ref = s.inputs(int(req.get("base_seed", 0)) * 1000003 + int(req.get("seed", 0)), 0)
    min_calls = int(req.get("min_calls", 50))
    max_calls = int(req.get("max_calls", 10000))
    min_ms = float(req.get("min_time_s", 0.5)) * 1e3
    max_ms = float(req.get("max_time_s", 30.0)) * 1e3
    warmup = int(req.get("warmup", 3))
    baselines = list(req.get("baselines", ["eager"]))
    timer = _Timer(s.device)

    outs = [torch.empty_like(r) for r in ref] if s.cand.preallocated else None
    last = {"outs": None}

    def poison():
        if outs is not None:
            _poison(outs, 0x5a)

    def cand():
        last["outs"] = s.cand(xs, outs)

    fns = {"candidate": cand}
    with torch.no_grad():
        if "eager" in baselines:
            fns["eager"] = lambda: s.model(*xs)
        if "compile" in baselines:
            mode = req.get("compile_mode", "default")
            compiled = torch.compile(s.model, mode=None if mode == "default" else mode)
            fns["compile"] = lambda: compiled(*xs)
        t_start = time.perf_counter()
        issue: dict[str, list[float]] = {k: [] for k in fns}  # host time to issue each warm-up call
        for name, fn in fns.items():
            n = 0
            while n < warmup or (time.perf_counter() - t_start) * 1e3 < 20.0 * (list(fns).index(name) + 1):
                try:
                    if name == "candidate":
                        poison()
                    _sync(s.device)
                    h0 = time.perf_counter()
                    fn()
                    issue[name].append((time.perf_counter() - h0) * 1e3)
                    _sync(s.device)
                except BaseException as e:  # noqa: BLE001
                    if name == "candidate":
                        raise _call_failure(e, "the candidate", s.path) from e
                    raise JobFailure("reference_failed", f"the {name} baseline raised {type(e).__name__}: {e}") from e
                n += 1
                if n > 1000:
                    break
        kernels = None
        if s.device == "cuda" and s.cand.kind in ("run", "modelnew"):
            try:
                poison()
                kernels = own_kernel_share(cand)
            except Exception as e:  # noqa: BLE001 - a profiler that cannot run leaves the rest standing
                kernels = {"checked": False, "why": f"torch.profiler: {type(e).__name__}: {e}"}
            if kernels.get("checked") and kernels["own_share"] < 0.5:
                raise JobFailure("rejected", f"the candidate's own kernels take {100 * kernels['own_share']:.0f}% of its GPU "
                                 f"time: most of the work is torch's ({kernels['kernels'][0]['name']})")
        # The first calls compile and fill caches: the later half of the warm-up says what a call costs.
        timer.set_hold(max(summarize(v[len(v) // 2:])["q3"] for v in issue.values()))
        empty = [timer(lambda: None)[1] for _ in range(20)] if s.device == "cuda" else []
        times = {k: [] for k in fns}
        hosts = {k: [] for k in fns}
        late = {k: 0 for k in fns}
        walls: list[float] = []
        clocks = clockmod.ClockLog() if s.device == "cuda" else None
        order = list(fns)
        start = time.perf_counter()
        rng = random.Random()
        while True:
            n = len(times["candidate"])
            elapsed = (time.perf_counter() - start) * 1e3
            if n >= max_calls or (n >= min_calls and elapsed >= min_ms) or (n >= 1 and elapsed >= max_ms):
                break
            if clocks is not None and n % 10 == 0:
                clocks.sample()
            rot = n % len(order)
            for name in order[rot:] + order[:rot]:
                try:
                    ms, wall, host, was_late = timer(fns[name], poison if name == "candidate" else None,
                                                     host_counts=name == "candidate")
                except BaseException as e:  # noqa: BLE001
                    if name == "candidate":
                        raise _call_failure(e, "the candidate", s.path) from e
                    raise JobFailure("reference_failed", f"the {name} baseline raised {type(e).__name__}: {e}") from e
                if name == "candidate":
                    _tampered(quick=True)
                times[name].append(ms)
                hosts[name].append(host)
                late[name] += was_late
                if name == "candidate":
                    walls.append(wall)
            if rng.random() < 0.125:
                _check_timed(s, last["outs"], ref, n)
        if clocks is not None:
            clocks.sample()
        _check_timed(s, last["outs"], ref, len(times["candidate"]) - 1)
        _tampered()
    reply = {"ok": True, "candidate": summarize(times["candidate"]),
             "baselines": {k: summarize(v) for k, v in times.items() if k != "candidate"},
             "timer": ((f"CUDA events on torch's current stream after a hold kernel filling the device ({timer.hold_ms:.2f} ms) "
                        "and a read of 2x L2, the candidate's time the longer of their span and the host's time to issue "
                        "the call; device synchronized after each") if _HOLD and timer.hold_cycles else
                       f"CUDA events on torch's current stream; a read of 2x L2 before each call; device synchronized "
                       f"after each (no hold kernel: {timer.hold_why})" if _HOLD else
                       "CUDA events on torch's current stream; a read of 2x L2 before each call; device synchronized "
                       "after each (KFAB_LAUNCH_HOLD=0: no hold kernel)")
             if s.device == "cuda" else "perf_counter around the call; no cache flush"}
    if kernels is not None:
        reply["own_kernels"] = kernels
    if s.device == "cuda":
        reply["candidate_wall"] = summarize(walls)
        reply["empty_call_wall"] = summarize(empty)
        reply["device"] = torch.cuda.get_device_name(0)
        reply["clocks"] = clocks.to_json()
        reply["launch"] = {"hold_ms": timer.hold_ms, "timer_version": TIMER_VERSION if timer.hold_cycles else 1,
                           "host_ms": {k: summarize(v)["median"] for k, v in hosts.items()},
                           "late_starts": late, "calls": {k: len(v) for k, v in times.items()}}
    return reply


# Kernels that are torch's own (aten, cuBLAS, CUTLASS, cuDNN, inductor), not a candidate's.
_TORCH_KERNELS = ("at::", "at_cuda_detail", "cublas", "cutlass", "cudnn", "xmma", "nvjet", "sm90_", "sm80_", "ampere_",
                  "gemv", "gemmSN", "splitKreduce", "triton_poi_", "triton_red_", "triton_per_", "triton_tem_", "void gemm")


def own_kernel_share(fn) -> dict:
    """The share of GPU kernel time in kernels that are not torch's, over three calls of fn. A Python
    candidate that leaves most of the work to torch's kernels does not implement the operation."""
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
    own = theirs = 0.0
    names: dict[str, float] = {}
    for e in prof.events():
        if getattr(e, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        name = e.name
        if name.startswith(("Memset", "Memcpy", "[memory]")):
            continue
        t = float(getattr(e, "device_time_total", 0.0) or getattr(e, "cuda_time_total", 0.0) or 0.0)
        names[name] = names.get(name, 0.0) + t
        if any(k in name for k in _TORCH_KERNELS):
            theirs += t
        else:
            own += t
    total = own + theirs
    top = sorted(names.items(), key=lambda kv: -kv[1])[:5]
    return {"checked": True, "own_share": own / total if total > 0 else 1.0,
            "kernels": [{"name": n[:120], "us": t} for n, t in top]}


def _check_timed(s: _Setup, got, ref, n: int) -> None:
    if got is None:
        return
    st = Stats()
    for i, r in enumerate(ref):
        compare(got[i], r, s.atol, s.rtol, f"output{i}", 0, 3, st)
    if not st.ok():
        raise JobFailure("incorrect", f"the output of timed call {n + 1} does not match the reference: work was skipped "
                         "while timed", evidence=st.to_json())


def check(req) -> dict:
    """How much the reference's outputs vary across seeds: a task whose outputs barely change cannot
    tell a candidate that ignores its inputs from one that computes."""
    t = _task(req)
    device = _device(req)
    dtype = _dtype(req)
    shape = dict(req.get("shape", {}))
    model = t.model(shape, device, dtype)
    atol, rtol = t.tol(dtype)
    outs = []
    for k in range(int(req.get("seeds", 4))):
        xs = t.inputs(shape, 7919 * (k + 1), device, dtype, 1.0)
        outs.append(_reference(model, xs, device))
    findings = []
    for i in range(len(outs[0])):
        o0 = outs[0][i]
        if not isinstance(o0, torch.Tensor) or not o0.is_floating_point():
            continue
        name = f"output{i}" if len(outs[0]) > 1 else "output"
        a = o0.double()
        if not torch.isfinite(a).all():
            findings.append(f"{name}: NaN or Inf in the reference's output")
        if a.numel() > 1 and float(a.max() - a.min()) <= atol + rtol * float(a.abs().max()):
            findings.append(f"{name}: every element is the same value ({float(a.flatten()[0]):.6g}) within tolerance")
        same = all(torch.allclose(o[i].double(), a, atol=atol, rtol=rtol) for o in outs[1:])
        if same:
            findings.append(f"{name}: the same for every seed within tolerance: a candidate that ignores its inputs passes")
        frac_zero = float((a == 0).double().mean())
        if frac_zero > 0.99:
            findings.append(f"{name}: {100 * frac_zero:.1f}% of its elements are zero")
    return {"ok": True, "degenerate": bool(findings), "findings": findings, "shape": t.shape_symbols(shape)}


def handle(req: dict) -> dict:
    op = req.get("op", "")
    try:
        if op == "hello":
            return hello(req)
        if op == "describe":
            return describe(req)
        if op == "verify":
            return verify(req)
        if op == "time":
            return time_job(req)
        if op == "check":
            return check(req)
        if op == "trace":
            t = _task(req)
            return {"ok": True, **tracemod.trace(t, t.gpu if req.get("target") == "cuda" else {})}
        return {"ok": False, "kind": "protocol_error", "detail": f'unknown op "{op}"'}
    except JobFailure as f:
        j = {"ok": False, "kind": f.kind, "detail": f.detail}
        if f.fatal:
            j["fatal"] = True
        if f.evidence:
            j["evidence"] = f.evidence
        return j
    except KeyError as e:
        return {"ok": False, "kind": "protocol_error", "detail": f"malformed request: missing {e}"}
    except taskmod.TaskError as e:
        return {"ok": False, "kind": "task_error", "detail": str(e)}


_integrity = guard.Integrity(["kfab_worker.jobs", "kfab_worker.compare", "kfab_worker.guard", "kfab_worker.hold",
                              "kfab_worker.clocks", "kfab_worker.candidate", "kfab_worker.protocol", "kfab_worker.task"])
