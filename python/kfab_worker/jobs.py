"""The worker's jobs (docs/runner-protocol.md, "Python worker"). A worker plays one of two roles:

- a candidate's worker (kfab stops it between jobs) loads the candidate: `call` (one call on a seed's
  inputs; its outputs exported for the trusted worker), `time_prepare`, `time_call` (one timed call on
  inputs changed anew), `export` (the last timed call's outputs), `time_end`;
- the trusted worker (`--trusted`) never loads candidate code: `reference` (the Model's answer, kept
  here), `compare` (a candidate's exported outputs against it), the same timing jobs for torch eager
  and torch.compile, and `describe`, `check`, `trace`."""
from __future__ import annotations

import gc
import json
import math
import os
import random
import resource
import sys
import time
import traceback
from pathlib import Path

import torch

from . import PROTOCOL
from . import candidate as candmod
from . import clocks as clockmod
from . import footprint as fpmod
from . import guard
from . import hold as holdmod
from . import share
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

# The trusted worker never loads a candidate (set by __main__ from --trusted).
TRUSTED = False


def set_trusted() -> None:
    global TRUSTED
    TRUSTED = True
    share.not_dumpable()


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


def _no_memory(doing: str, e: BaseException, fp: dict) -> str:
    """An OutOfMemoryError of the harness's own work (the Model, the inputs), said as what it is, with
    the figures."""
    where = ""
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        where = (f"; this process holds {fpmod.gib(torch.cuda.memory_reserved())}, the device has {fpmod.gib(free)} of "
                 f"{fpmod.gib(total)} free")
    need = ""
    if "error" not in fp:
        need = (f"; the problem: inputs {fpmod.gib(fp['inputs'])}, outputs {fpmod.gib(fp['outputs'])}, weights "
                f"{fpmod.gib(fp['weights'])}")
    return f"the device ran out of memory {doing}{need}{where} ({str(e).splitlines()[0][:200]})"


# Elements of one slice of an input's fingerprint, and the weights that mix them (made once per device).
_FP_SLICE = 1 << 22
_fp_weights: dict = {}


def _fingerprint(x: torch.Tensor) -> tuple:
    """Two sums over the bits of `x` (plain, and weighted by a random odd multiplier per position,
    both wrapping in int64), a slice at a time: what a check that the candidate left its inputs alone
    compares, in a few MiB of memory where a copy of the inputs would take as much as they do."""
    flat = x.detach().reshape(-1)
    if flat.numel() == 0:
        return (0, 0, tuple(x.shape))
    size = flat.element_size()
    as_int = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}.get(size)
    bits = flat.view(as_int) if as_int is not None and not x.is_complex() else flat.view(torch.uint8)
    dev = str(bits.device)
    if dev not in _fp_weights:
        g = torch.Generator(device="cpu")
        g.manual_seed(random.getrandbits(62))
        _fp_weights[dev] = (torch.randint(1, 1 << 62, (_FP_SLICE,), generator=g, dtype=torch.int64) | 1).to(bits.device)
    w = _fp_weights[dev]
    plain = torch.zeros((), dtype=torch.int64, device=bits.device)
    mixed = torch.zeros((), dtype=torch.int64, device=bits.device)
    n = bits.numel()
    for lo in range(0, n, _FP_SLICE):
        v = bits[lo:lo + _FP_SLICE].to(torch.int64)
        plain += v.sum()
        mixed += (v * w[:v.numel()]).sum()
    return (int(plain), int(mixed), tuple(x.shape))


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
    """The Model's outputs, each kept as it came where nothing else can change it (no copy: at
    KernelBench's sizes a copy is gigabytes beside the answer), else a copy of it. Until the Model's
    next forward: one that replays a CUDA graph writes its outputs in place, so an answer kept past
    that is a copy (_keep_answer)."""
    with torch.no_grad():
        out = taskmod.as_list(model(*inputs))
    _sync(device)
    alone = torch.empty(0)
    alone_refs = _refs(alone)  # what a tensor no one else holds counts, measured the same way
    kept = []
    while out:
        o = out.pop(0)
        refs = _refs(o)
        kept.append(o if _owned(o, refs, alone_refs) else o.detach().clone() if isinstance(o, torch.Tensor) else o)
        del o
    return kept


def _refs(o) -> int:
    return sys.getrefcount(o)


def _owned(o, refs: int, alone_refs: int) -> bool:
    """Whether `o`, popped from the Model's output list, is the caller's alone: no more Python
    references than a tensor no one else holds (none from an input, a parameter, an attribute or a
    global the Model keeps), no view of another tensor, and no other tensor on its storage (a
    detached alias the Model kept). Otherwise the Model's next forward could change the answer kept."""
    if not isinstance(o, torch.Tensor) or o._base is not None or refs > alone_refs:
        return False
    storage = o.untyped_storage()
    # the storage's owners: `o` and the Python storage object just made
    return torch._C._storage_Use_Count(storage._cdata) <= 2


def _perturb(xs: list, p: int, last: bool) -> list:
    """Changes four elements of every float input tensor in place, drawn from `p`: each takes the value
    of another element of the same tensor (the inputs' own distribution and domain). With `last`, the
    last element is one of them (verification's check of answers cached under a sample of the values);
    timed calls change four places no sample can foresee. Returns what undoes it."""
    undo = []
    if not p:
        return undo
    g = random.Random(p)
    for i, x in enumerate(xs):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() == 0:
            continue
        flat = x.view(-1)
        n = flat.numel()
        for k in range(4):
            at = n - 1 if (k == 0 and last) else g.randrange(n)
            src = g.randrange(n)
            undo.append((flat, at, flat[at].clone()))
            flat[at] = flat[src].clone()
    return undo


def _restore(undo: list) -> None:
    for flat, at, old in reversed(undo):
        flat[at] = old


def _key(req) -> str:
    return json.dumps([req["task"], req.get("candidate", {}).get("path"), req.get("shape", {}), req.get("target", "cpu"),
                       req.get("dtype", "f32"), req.get("tolerance")], sort_keys=True)


class _Setup:
    """What the jobs of one task, shape and side share, kept from one job to the next: the model (the
    trusted worker's reference; in a candidate's worker only the source of the candidate's weights),
    the candidate (not in the trusted worker) and the current inputs."""

    def __init__(self, req):
        self.key = _key(req)
        self.task = _task(req)
        self.device = _device(req)
        self.dtype = _dtype(req)
        self.shape = dict(req.get("shape", {}))
        # What one side of the problem holds on a GPU: the trusted worker its weights, one input set and
        # the reference's answer (and a comparison's slices); a candidate's worker its weights, one input
        # set and its outputs. Checked before anything is made.
        self.fp = fpmod.footprint(self.task, self.shape, self.dtype)
        if "error" not in self.fp:
            need = self.fp["inputs"] + self.fp["weights"] + self.fp["outputs"]
            if TRUSTED:
                need += min(self.fp["outputs"], 1 << 30)
            try:
                fpmod.check_room(self.fp, need, "the trusted worker (the Model)" if TRUSTED else "the candidate's worker",
                                 self.device, fpmod.room_wait_s(float(req.get("timeout_s") or 0)))
            except fpmod.NoRoom as e:
                raise JobFailure("task_error", str(e)) from e
        try:
            self.model = self.task.model(self.shape, self.device, self.dtype)
        except taskmod.TaskError as e:
            raise JobFailure("task_error", str(e)) from e
        except torch.cuda.OutOfMemoryError as e:
            raise JobFailure("task_error", _no_memory("making the task's Model", e, self.fp)) from e
        self.atol, self.rtol = self.task.tol(self.dtype, req.get("tolerance"))
        # where a value differs from eager's beyond the tolerance, the Model run in float64 may judge it
        # (kfab --judge float64, the default); --judge eager: eager's fp32 answer alone, as KernelBench checks
        self.judge64 = req.get("judge", "float64") != "eager"
        self.calls = 0
        self.xs = None
        self.xs_id = None
        self.undo: list = []
        self.outs = None
        self.last = None
        self.answer = None
        self.answer_id = None
        self.answer_last = True
        self.answer64 = None  # (answer_id, the Model's outputs in float64), made where a comparison failed
        self.forward_s: dict = {}  # (seed, scale) -> seconds the Model's forward took (its float64 run's estimate)
        self.answers: dict = {}  # the trusted worker's answers kept per (seed, scale): _Answers
        self.exported = None
        self.cand = None
        if TRUSTED:
            return
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

    def inputs(self, seed: int, scale: float, perturb: int = 0, last: bool = True):
        """The inputs of (seed, scale), changed by `perturb`; made once per (seed, scale)."""
        ident = (seed, scale)
        if self.xs_id != ident:
            self.undo = []
            self.xs = None  # the last set goes before the next is made
            try:
                self.xs = self.task.inputs(self.shape, seed, self.device, self.dtype, scale)
            except taskmod.TaskError as e:
                raise JobFailure("task_error", str(e)) from e
            except torch.cuda.OutOfMemoryError as e:
                raise JobFailure("task_error", _no_memory("making the inputs (get_inputs)", e, self.fp)) from e
            self.xs_id = ident
        _restore(self.undo)
        self.undo = _perturb(self.xs, perturb, last)
        return self.xs

    def drop_inputs(self) -> None:
        """The trusted worker on a GPU, between its jobs: its inputs go back to the device (made again in
        milliseconds when needed), so that the candidate's worker has the room while it runs."""
        if self.device != "cuda" or hasattr(self, "fns"):
            return
        self.xs = None
        self.xs_id = None
        self.undo = []
        torch.cuda.empty_cache()

    def call(self, xs, pattern: int, check_threads: bool):
        """One candidate call on fresh (poisoned) outputs; returns its outputs."""
        outs = None
        if self.cand.preallocated:
            if self.outs is None:
                ref_like = self.answer_like()
                self.outs = [torch.empty_like(r) if isinstance(r, torch.Tensor) else r for r in ref_like]
            outs = self.outs
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

    def answer_like(self) -> list:
        """Outputs shaped like the Model's (for preallocated candidates): the Model's forward at the
        current inputs' shapes with meta tensors, no real computation and no answer."""
        if self.last_shapes is None:
            raise JobFailure("protocol_error", "the output shapes are unknown: kfab sends them with the first call")
        return [torch.empty(s, dtype=taskmod.DTYPES_BY_NAME[d], device=self.device) for s, d in self.last_shapes]

    last_shapes = None


_setup: _Setup | None = None


def _setup_for(req) -> _Setup:
    global _setup
    if _setup is None or _setup.key != _key(req):
        if _setup is not None:
            # The last task's, shape's or candidate's tensors go back to the device before the next are
            # made: the other worker needs the room (a kept worker sees many candidates in a run).
            _setup = None
            keep = f"{req.get('candidate', {}).get('path')}|{req.get('target', 'cpu')}"
            for k in [k for k in _candidates if k != keep]:
                del _candidates[k]
            _release()
        _setup = _Setup(req)
    return _setup


def _release() -> None:
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _export_reply(s: _Setup, outputs: list) -> dict:
    try:
        e = share.export(outputs, s.device)
    except OSError as err:
        raise JobFailure("crashed", f"the candidate's outputs cannot be exported: {err}") from err
    s.exported = e  # alive until the next export: the trusted worker reads the memory it names
    reply = {"ok": True, "outputs": e.meta}
    if e.fd is not None:
        share.send_fd(e.fd)
        os.close(e.fd)
        reply["fds"] = 1
    return reply


def call_job(req) -> dict:
    """One candidate call on a seed's inputs (changed by `perturb`), outputs poisoned with `pattern`."""
    s = _setup_for(req)
    if "output_shapes" in req:
        s.last_shapes = [(list(o[0]), str(o[1])) for o in req["output_shapes"]]
    s.exported = None  # the last call's outputs, compared already: not kept beside this call's
    xs = s.inputs(int(req["seed"]), float(req.get("scale", 1.0)), int(req.get("perturb", 0)),
                  bool(req.get("perturb_last", True)))
    before = [_fingerprint(x) if isinstance(x, torch.Tensor) else None for x in xs]
    out = s.call(xs, int(req.get("pattern", 0x5a)), check_threads=s.calls > 0)
    for i, (x, f) in enumerate(zip(xs, before)):
        if isinstance(x, torch.Tensor) and _fingerprint(x) != f:
            raise JobFailure("rejected", f"input {i} was modified by the candidate")
    return _export_reply(s, list(out) if isinstance(out, (list, tuple)) else [out])


def reference_job(req) -> dict:
    """The Model's answer on a seed's inputs (changed by `perturb`), kept here for `compare`. The seed's
    index picks the input scale; a scale that makes the answer NaN or Inf is dropped for the task."""
    s = _setup_for(req)
    seed = int(req["seed"])
    index = int(req.get("index", 0))
    perturb = int(req.get("perturb", 0))
    scale = s.task.scale_for(index) if req.get("scaled", True) else 1.0
    s.answer = None  # the last answer goes before the next is made
    kept = s.answers.get((seed, scale)) if not perturb else None
    try:
        if kept is not None:
            ref = kept
        else:
            t0 = time.perf_counter()
            xs = s.inputs(seed, scale, perturb, bool(req.get("perturb_last", True)))
            ref = _reference(s.model, xs, s.device)
            if scale != 1.0 and any(isinstance(r, torch.Tensor) and r.is_floating_point() and not torch.isfinite(r).all()
                                    for r in ref):
                s.task.reject_scale(scale)
                scale = 1.0
                ref = None
                xs = s.inputs(seed, scale, perturb, bool(req.get("perturb_last", True)))
                ref = _reference(s.model, xs, s.device)
            s.forward_s[(seed, scale)] = time.perf_counter() - t0
            if not perturb:
                _keep_answer(s, (seed, scale), ref, time.perf_counter() - t0)
    except JobFailure:
        raise
    except torch.cuda.OutOfMemoryError as e:
        raise JobFailure("task_error", _no_memory("running the task's Model", e, s.fp)) from e
    except Exception as e:  # noqa: BLE001
        raise JobFailure("reference_failed", f"the task's Model raised {type(e).__name__}: {e}") from e
    finally:
        s.drop_inputs()
    s.answer = ref
    s.answer_id = (seed, scale, perturb)
    s.answer_last = bool(req.get("perturb_last", True))
    shapes = [[list(r.shape), taskmod.DTYPE_NAMES.get(r.dtype, "f32")] if isinstance(r, torch.Tensor) else [[], "f32"]
              for r in ref]
    return {"ok": True, "scale": scale, "outputs": len(ref), "output_shapes": shapes,
            "shape": s.task.shape_symbols(s.shape)}


# Answers kept on the device up to this share of its memory, each at most _KEEP_DEVICE_ONE of it (a large
# answer is made again in milliseconds there, and its room is the candidate's); otherwise on the host (up
# to a share of the host's available memory) where the Model takes longer than copying its answer would.
_KEEP_DEVICE_SHARE = 0.10
_KEEP_DEVICE_ONE = 0.02
_KEEP_HOST_SHARE = 0.25
_HOST_COPY_BYTES_PER_S = 5e9


def _keep_answer(s: _Setup, key: tuple, ref: list, took_s: float) -> None:
    """The trusted worker keeps the Model's answer for an unchanged (seed, scale): every candidate of a
    run (kfab keeps this worker from one candidate to the next) is compared with it without running
    the Model again. On the CPU target and on a GPU within _KEEP_DEVICE_SHARE of its memory the answer
    is kept where it is; otherwise on the host, when the Model took longer than that copy takes."""
    size = fpmod.nbytes(ref)
    held = [fpmod.nbytes(a) for a in s.answers.values()]
    if s.device != "cuda":
        if sum(held) + size <= _KEEP_HOST_SHARE * fpmod.host_available():
            s.answers[key] = ref
        return
    on_device = sum(fpmod.nbytes(a) for a in s.answers.values() if any(isinstance(t, torch.Tensor) and t.is_cuda for t in a))
    total = torch.cuda.mem_get_info()[1]
    if size <= _KEEP_DEVICE_ONE * total and on_device + size <= _KEEP_DEVICE_SHARE * total:
        # a copy (small, by the rule above): the answer may be the Model's own output (see _reference),
        # which a Model that replays a CUDA graph would overwrite at its next forward
        s.answers[key] = [t.clone() if isinstance(t, torch.Tensor) else t for t in ref]
        return
    on_host = sum(held) - on_device
    if took_s > size / _HOST_COPY_BYTES_PER_S and on_host + size <= _KEEP_HOST_SHARE * fpmod.host_available():
        s.answers[key] = [t.to("cpu") if isinstance(t, torch.Tensor) else t for t in ref]


def compare_job(req) -> dict:
    """A candidate's exported outputs against the answer `reference` kept, while kfab holds the
    candidate's worker stopped."""
    if _setup is None or _setup.answer is None:
        raise JobFailure("protocol_error", "compare before reference")
    s = _setup
    fd = share.receive_fd() if int(req.get("fds", 0)) > 0 else None
    try:
        imp = share.import_outputs(list(req.get("outputs", [])), fd, s.device)
    except (ValueError, OSError) as e:
        raise JobFailure("crashed", f"the candidate's outputs cannot be read: {e}") from e
    try:
        ref = s.answer
        got = imp.tensors
        names = [f"output{i}" if len(ref) > 1 else "output" for i in range(len(ref))]
        seed, call = int(req.get("seed", 0)), int(req.get("call", 1))
        stats = [Stats() for _ in ref]
        if len(got) != len(ref):
            st = stats[0] if stats else Stats()
            st.problem = f"the candidate returned {len(got)} outputs, the reference {len(ref)}"
            st.mismatches += 1
        else:
            for i, r in enumerate(ref):
                g = got[i]
                if not isinstance(g, torch.Tensor):
                    stats[i].problem = f"{names[i]}: the candidate returned {g}, not a tensor"
                    stats[i].mismatches += 1
                    continue
                compare(g, r, s.atol, s.rtol, names[i], seed, call, stats[i])
        _sync(s.device)
        failed = any(st.mismatches for st in stats) and not any(st.problem for st in stats)
        # while the candidate's outputs are still mapped (imp.close unmaps them)
        fp64 = _against_fp64(s, got, float(req.get("timeout_s") or 0)) if failed and s.dtype == torch.float32 else None
    finally:
        imp.close()
    total = Stats()
    outputs = []
    for i, st in enumerate(stats):
        o = st.to_json()
        o["name"] = names[i] if i < len(names) else f"output{i}"
        outputs.append(o)
        total.max_abs = max(total.max_abs, st.max_abs)
        total.max_rel = max(total.max_rel, st.max_rel)
        total.tol_used = max(total.tol_used, st.tol_used)
        total.checked += st.checked
        total.mismatches += st.mismatches
        total.nonfinite += st.nonfinite
        total.first = total.first or st.first
        total.problem = total.problem or st.problem
    r = total.to_json()
    r.update({"ok": True, "correct": total.ok(), "outputs": outputs})
    if fp64 is not None:
        if "skipped" not in fp64:
            fp64["judge"] = "float64" if s.judge64 else "eager"
        r["reference_fp64"] = fp64
        if s.judge64 and "skipped" not in fp64 and fp64.get("unrescued", 1) == 0 and fp64.get("rescued", 0) > 0:
            _judged_by_fp64(r, fp64)
    return r


def _judged_by_fp64(r: dict, fp64: dict) -> None:
    """Every value that differs from eager's beyond the tolerance is one where eager's own answer is outside
    the tolerance of the Model run in float64 and the candidate's within it: correct, judged there by the
    float64 answer (eager's own fp32 rounding is no answer to match). The counts against eager stay in the
    evidence; `tolerance_used` becomes each value's share of the tolerance of the answer that judges it."""
    r["judged_by_float64"] = r.get("mismatches", 0)
    r["eager_mismatches"] = r.get("mismatches", 0)
    r["mismatches"] = 0
    r["correct"] = True
    if "first_mismatch" in r:
        r["first_eager_mismatch"] = r.pop("first_mismatch")
    r["tolerance_used"] = fp64.get("judged_tolerance_used", r.get("tolerance_used"))
    for o in r.get("outputs", []):
        if o.get("mismatches"):
            o["eager_mismatches"] = o["mismatches"]
            o["mismatches"] = 0
            if "first_mismatch" in o:
                o["first_eager_mismatch"] = o.pop("first_mismatch")


# The float64 run's time, as a multiple of the fp32 forward's (a CPU's double GEMM runs at half its float one's
# rate and more), may take at most this share of the comparison job's deadline.
_FP64_SLOWER = 4.0
_FP64_SHARE = 0.25


def _fp64_answer(s: _Setup, deadline_s: float) -> list:
    """The Model's outputs on the current answer's inputs with its weights and inputs in float64 (the
    weights copied, the Model left as it is), made once per answer; TaskError where it cannot be."""
    if s.answer64 is not None and s.answer64[0] == s.answer_id:
        return s.answer64[1]
    s.answer64 = None
    need = 3 * (s.fp.get("inputs", 0) + s.fp.get("weights", 0) + s.fp.get("outputs", 0))  # each twice the size, and the slices
    free = torch.cuda.mem_get_info()[0] if s.device == "cuda" else fpmod.host_available()
    if "error" in s.fp or need > 0.8 * free:
        raise taskmod.TaskError(f"not made: the Model in float64 needs about {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB is free")
    seed, scale, perturb = s.answer_id
    took = s.forward_s.get((seed, scale))
    if deadline_s > 0 and took is not None and _FP64_SLOWER * took > _FP64_SHARE * deadline_s:
        raise taskmod.TaskError(f"not made: the Model's forward took {took:.1f} s, and its float64 run would take about "
                                f"{_FP64_SLOWER * took:.0f} s of the comparison's {deadline_s:.0f} s")
    try:
        xs = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
              for x in s.inputs(seed, scale, perturb, s.answer_last)]
        s.drop_inputs()
        state = {n: (t.detach().double() if t.is_floating_point() else t.detach().clone()) for n, t in
                 list(s.model.named_parameters()) + list(s.model.named_buffers())}
        with torch.no_grad():
            out = taskmod.as_list(torch.func.functional_call(s.model, state, tuple(xs)))
        del xs, state
    except Exception as e:  # noqa: BLE001 - a Model that makes float32 tensors of its own, or no room
        s.drop_inputs()
        raise taskmod.TaskError(f"not made: the Model in float64 raised {type(e).__name__}: {str(e)[:200]}") from e
    # kept for the next comparison with this answer where small (on a GPU, its room is the candidate's)
    if s.device != "cuda" or fpmod.nbytes(out) <= _KEEP_DEVICE_ONE * torch.cuda.mem_get_info()[1]:
        s.answer64 = (s.answer_id, out)
    return out


def _used(t: torch.Tensor, want: torch.Tensor, s: _Setup) -> torch.Tensor:
    """Each value's share of the tolerance (atol + rtol |want|) of t against want, both float64, with
    compare.py's rules: NaN meets NaN and an infinity the same one (0 used), any other value that is not
    finite on either side uses all of it and more (inf); an allowance of 0 is met by 0 only."""
    fin = torch.isfinite(want) & torch.isfinite(t)
    diff = torch.where(fin, (t - want).abs(), torch.zeros_like(want))
    allowed = s.atol + s.rtol * want.abs()
    used = torch.where(allowed > 0, diff / allowed.clamp_min(1e-300), torch.where(diff > 0, math.inf, 0.0))
    same = (torch.isnan(want) & torch.isnan(t)) | (torch.isinf(want) & (t == want))
    return torch.where(fin, used, torch.where(same, torch.zeros_like(used), torch.full_like(used, math.inf)))


def _against_fp64(s: _Setup, got: list, deadline_s: float = 0.0) -> dict:
    """Where a candidate's outputs differ from the Model's: both against the Model run in float64, in the
    task's tolerance. A reference that is itself outside it (KernelBench's level2_14: row sums of 8192
    products of about 52, which cancel to values near 0) makes the check one of matching eager's fp32
    rounding, not of fp32 accuracy: the verdict says so. Per value, where the candidate differs from eager
    beyond the tolerance: `rescued` where eager's answer is outside the tolerance of the float64 one and the
    candidate's within it, else `unrescued`; `judged_tolerance_used`: the worst value's share of the tolerance
    of the answer that judges it (the float64 one where eager's is outside it and the candidate's within it,
    else eager's)."""
    try:
        want64 = _fp64_answer(s, deadline_s)
    except taskmod.TaskError as e:
        return {"skipped": str(e)}
    j = {"checked": 0, "reference_outside": 0, "reference_tolerance_used": 0.0, "candidate_outside": 0,
         "candidate_tolerance_used": 0.0, "rescued": 0, "unrescued": 0, "judged_tolerance_used": 0.0}
    for r, g, w in zip(s.answer, got, want64):
        if not all(isinstance(t, torch.Tensor) for t in (r, g, w)) or r.shape != w.shape or g.shape != w.shape:
            j = {"skipped": "an output that is not a tensor of the reference's shape"}
            break
        w, r, g = w.detach().reshape(-1), r.detach().reshape(-1), g.detach().reshape(-1)
        for lo in range(0, w.numel(), 1 << 24):
            ww = w[lo:lo + (1 << 24)]
            rr = r[lo:lo + (1 << 24)].to(device=ww.device, dtype=torch.float64)
            gg = g[lo:lo + (1 << 24)].to(device=ww.device, dtype=torch.float64)
            ref_used, cand_used, eager_used = _used(rr, ww, s), _used(gg, ww, s), _used(gg, rr, s)
            for name, used in (("reference", ref_used), ("candidate", cand_used)):
                j[f"{name}_outside"] += int((used > 1).sum())
                j[f"{name}_tolerance_used"] = max(j[f"{name}_tolerance_used"], float(used.max()) if used.numel() else 0.0)
            # a value that differs from eager's is judged by the float64 answer only where eager's own is outside it
            differs, judged64 = eager_used > 1, (ref_used > 1) & (cand_used <= 1)
            j["rescued"] += int((differs & judged64).sum())
            j["unrescued"] += int((differs & ~judged64).sum())
            judged = torch.where(judged64, cand_used, eager_used)
            j["judged_tolerance_used"] = max(j["judged_tolerance_used"], float(judged.max()) if judged.numel() else 0.0)
        j["checked"] += w.numel()
    for k in ("reference_tolerance_used", "candidate_tolerance_used", "judged_tolerance_used"):
        if k in j and not math.isfinite(j[k]):
            j[k] = "inf"
    del want64
    if s.device == "cuda":
        torch.cuda.empty_cache()  # the float64 run's blocks go back: the room is the candidate's
    return j


def hello(req) -> dict:
    j = {"ok": True, "protocol": PROTOCOL, "worker": "python", "trusted": TRUSTED, "torch": torch.__version__,
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
    atol, rtol, source = t.tol_with_source(_dtype(req), req.get("tolerance"))
    d["tolerance_used"] = {"atol": atol, "rtol": rtol, "dtype": req.get("dtype", "f32"), "source": source}
    if req.get("footprint"):
        # at the tuning shape of the target (KFAB_GPU on a GPU): what kfab sizes its deadlines from
        d["footprint"] = fpmod.footprint(t, t.gpu if req.get("target") == "cuda" else {}, _dtype(req))
    d["ok"] = True
    d["reference_params"] = []
    return d


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
            # the process's CPU time (all its threads) and involuntary switches beside the wall time: a
            # call that waited for its threads or for a busy machine shows it (the verdict's noise)
            c0, v0 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
            t0 = time.perf_counter()
            fn()
            ms = (time.perf_counter() - t0) * 1e3
            self.last_cpu_ms = (time.process_time() - c0) * 1e3
            self.last_preempted = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw > v0
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


def time_prepare_job(req) -> dict:
    """Before timed calls, on the timing inputs (a seed never verified): the candidate (a candidate's
    worker) or the baselines (the trusted worker: torch eager, and torch.compile when asked) warmed up,
    the hold kernel sized from their host times, what an empty timed call costs. A candidate's worker
    also checks that most of its GPU time is in its own kernels."""
    s = _setup_for(req)
    if "output_shapes" in req:
        s.last_shapes = [(list(o[0]), str(o[1])) for o in req["output_shapes"]]
    if TRUSTED:
        s.answer = None  # made again for the timed calls that are checked
    s.exported = None
    s.inputs(int(req["seed"]), 1.0)
    warmup = int(req.get("warmup", 3))
    s.timer = _Timer(s.device)
    fns: dict = {}
    if TRUSTED:
        baselines = list(req.get("baselines", ["eager"]))
        with torch.no_grad():
            if "eager" in baselines:
                fns["eager"] = lambda: s.model(*s.xs)
            if "compile" in baselines:
                mode = req.get("compile_mode", "default")
                compiled = torch.compile(s.model, mode=None if mode == "default" else mode)
                fns["compile"] = lambda: compiled(*s.xs)
    else:
        # the outputs verification used, when they have the shapes (one output set in this worker)
        s.cand_outs = (s.outs if s.outs is not None else s.answer_like()) if s.cand.preallocated else None

        def cand():
            s.last = s.cand(s.xs, s.cand_outs)
        fns["candidate"] = cand
    s.fns = fns
    issue: dict[str, list[float]] = {k: [] for k in fns}  # host time to issue each warm-up call
    t_start = time.perf_counter()
    with torch.no_grad():
        for pos, (name, fn) in enumerate(fns.items()):
            n = 0
            while n < warmup or (time.perf_counter() - t_start) * 1e3 < 20.0 * (pos + 1):
                try:
                    _poison_timed(s)
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
        reply: dict = {"ok": True}
        if not TRUSTED and s.device == "cuda" and s.cand.kind in ("run", "modelnew"):
            try:
                _poison_timed(s)
                kernels = own_kernel_share(fns["candidate"])
            except Exception as e:  # noqa: BLE001 - a profiler that cannot run leaves the rest standing
                kernels = {"checked": False, "why": f"torch.profiler: {type(e).__name__}: {e}"}
            if kernels.get("checked") and kernels["own_share"] < 0.5:
                raise JobFailure("rejected", f"the candidate's own kernels take {100 * kernels['own_share']:.0f}% of its GPU "
                                 f"time: most of the work is torch's ({kernels['kernels'][0]['name']})")
            reply["own_kernels"] = kernels
        # The first calls compile and fill caches: the later half of the warm-up says what a call costs.
        s.timer.set_hold(max(summarize(v[len(v) // 2:])["q3"] for v in issue.values()))
        if s.device == "cuda":
            reply["empty_call_wall"] = summarize([s.timer(lambda: None)[1] for _ in range(20)])
            s.clocks = clockmod.ClockLog()
    reply["timer"] = _timer_text(s.timer) if s.device == "cuda" else "perf_counter around the call; no cache flush"
    return reply


def _poison_timed(s: _Setup) -> None:
    if not TRUSTED and s.cand_outs is not None:
        _poison(s.cand_outs, 0x5a)


def time_call_job(req) -> dict:
    """One timed call: a candidate's on the timing inputs changed anew by `perturb`; the trusted
    worker's of the baseline named by `which`."""
    s = _setup
    if s is None or not hasattr(s, "fns"):
        raise JobFailure("protocol_error", "time_call before time_prepare")
    which = "candidate" if not TRUSTED else str(req.get("which", "eager"))
    if which not in s.fns:
        raise JobFailure("protocol_error", f"no timed function {which}")
    if not TRUSTED:
        s.inputs(s.xs_id[0], s.xs_id[1], int(req.get("perturb", 0)), False)
        if s.device == "cuda" and req.get("clocks"):
            s.clocks.sample()
    try:
        with torch.no_grad():
            ms, wall, host, late = s.timer(s.fns[which], (lambda: _poison_timed(s)) if not TRUSTED else None,
                                           host_counts=not TRUSTED)
    except BaseException as e:  # noqa: BLE001
        if not TRUSTED:
            raise _call_failure(e, "the candidate", s.path) from e
        raise JobFailure("reference_failed", f"the {which} baseline raised {type(e).__name__}: {e}") from e
    if not TRUSTED:
        _tampered(quick=True)
    reply = {"ok": True, "ms": ms, "wall_ms": wall, "host_ms": host, "late": bool(late)}
    if s.device != "cuda":
        reply["cpu_ms"] = s.timer.last_cpu_ms
        reply["preempted"] = bool(s.timer.last_preempted)
    return reply


def _disagreement(got: list, mine: list, atol: float, rtol: float) -> str | None:
    """Why the exported ModelNew's outputs are not the candidate's own, or None. A slice at a time
    (compare): a whole-tensor allclose makes several temporaries the size of the output, gigabytes at
    KernelBench's sizes."""
    if len(got) != len(mine):
        return f"the exported ModelNew returned {len(got)} outputs, the candidate {len(mine)}"
    for i, (g, m) in enumerate(zip(got, mine)):
        if not isinstance(m, torch.Tensor):
            continue
        st = Stats()
        compare(g, m, atol, rtol, f"output {i}", 0, 0, st)
        if not st.ok():
            why = st.problem or f"{st.mismatches} of {st.checked} values differ, max abs difference {st.max_abs:.3g}"
            return f"output {i} of the exported ModelNew differs from the candidate's: {why}"
    return None


def time_modelnew_job(req) -> dict:
    """After the candidate was timed: the ModelNew `kfab export` makes of it (req["modelnew"]; a native
    one calls kfab's own build of the candidate, req["library"], through the prebuilt extension,
    req["extension"])
    timed end to end as KernelBench times one, forward after forward on the timing inputs, by the same
    timer (its host time counts). Its outputs must agree with the candidate's own call first. Whatever
    goes wrong is said in the reply (`error`), not held against the candidate, which already passed."""
    s = _setup
    if s is None or TRUSTED or not hasattr(s, "timer"):
        raise JobFailure("protocol_error", "time_modelnew before the candidate's timing")
    if req.get("library"):
        os.environ["KFAB_MODELNEW_LIBRARY"] = str(req["library"])
        os.environ["KFAB_MODELNEW_EXTENSION"] = str(req["extension"])
    try:
        mod = taskmod.load_module(Path(req["modelnew"]), "kfab_modelnew")
        s.task.apply(s.shape)
        torch.manual_seed(taskmod.WEIGHT_SEED)
        model = mod.ModelNew(*s.task.mod.get_init_inputs()).to(s.device)
        if s.dtype != torch.float32:
            model = model.to(s.dtype)
        taskmod.kernelbench_mode(model)
        xs = s.inputs(s.xs_id[0], s.xs_id[1])
        with torch.no_grad():
            got = taskmod.as_list(model(*xs))
            mine = taskmod.as_list(s.call(xs, 0x5a, check_threads=False))
            _sync(s.device)
            differs = _disagreement(got, mine, s.atol, s.rtol)
            if differs:
                return {"ok": True, "error": differs}
            del got, mine
            for _ in range(3):
                model(*xs)
            times, hosts = [], []
            t_end = time.perf_counter() + float(req.get("min_time_s", 0.1))
            while len(times) < int(req.get("calls", 100)) or time.perf_counter() < t_end:
                ms, _, host, _ = s.timer(lambda: model(*xs), host_counts=True)
                times.append(ms)
                hosts.append(host)
                if len(times) >= 10000:
                    break
    except Exception as e:  # noqa: BLE001 - the export's failure, reported beside the verdict
        return {"ok": True, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}
    return {"ok": True, "ms": summarize(times), "host_ms": summarize(hosts)}


def export_job(req) -> dict:
    """The outputs of the candidate's last timed call, for the trusted worker to compare."""
    s = _setup
    if s is None or TRUSTED or not hasattr(s, "fns"):
        raise JobFailure("protocol_error", "export without a candidate's timed call")
    out = s.last
    return _export_reply(s, list(out) if isinstance(out, (list, tuple)) else [out])


def time_end_job(req) -> dict:
    s = _setup
    if s is None or not hasattr(s, "fns"):
        raise JobFailure("protocol_error", "time_end before time_prepare")
    reply: dict = {"ok": True}
    if s.device == "cuda":
        reply["hold_ms"] = s.timer.hold_ms
        reply["timer_version"] = TIMER_VERSION if s.timer.hold_cycles else 1
    if TRUSTED:
        # The baselines (a compiled Model among them) and the timing inputs go: the next candidate of a
        # run starts from the answers alone.
        del s.fns
        del s.timer
        s.answer = None
        s.drop_inputs()
        _release()
    if not TRUSTED:
        _tampered()
        if s.device == "cuda":
            s.clocks.sample()
            reply["clocks"] = s.clocks.to_json()
            reply["device"] = torch.cuda.get_device_name(0)
    return reply


def _timer_text(timer) -> str:
    if _HOLD and timer.hold_cycles:
        return (f"CUDA events on torch's current stream after a hold kernel filling the device ({timer.hold_ms:.2f} ms) "
                "and a read of 2x L2, the candidate's time the longer of their span and the host's time to issue "
                "the call; device synchronized after each")
    if _HOLD:
        return (f"CUDA events on torch's current stream; a read of 2x L2 before each call; device synchronized "
                f"after each (no hold kernel: {timer.hold_why})")
    return ("CUDA events on torch's current stream; a read of 2x L2 before each call; device synchronized "
            "after each (KFAB_LAUNCH_HOLD=0: no hold kernel)")


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
        if op == "memory":
            return {"ok": True, **fpmod.device_memory(bool(req.get("reset", False)))}
        if TRUSTED:
            # This process never loads candidate code: the reference's answers are safe here.
            if "candidate" in req:
                return {"ok": False, "kind": "protocol_error",
                        "detail": "the trusted worker serves the reference only; it loads no candidate"}
            if op == "reference":
                return reference_job(req)
            if op == "compare":
                return compare_job(req)
        else:
            if op == "call":
                return call_job(req)
            if op == "export":
                return export_job(req)
            if op == "time_modelnew":
                return time_modelnew_job(req)
        if op == "time_prepare":
            return time_prepare_job(req)
        if op == "time_call":
            return time_call_job(req)
        if op == "time_end":
            return time_end_job(req)
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
