"""The three kinds of candidate for a KernelBench-format task:

- native: a shared object built by kfab from a .cpp (cpu) or .cu (cuda) file, exporting kfab_run
  (include/kfab/candidate.h); its inputs are get_inputs() then the model's parameters and buffers;
- run: a Python module (Triton) exposing run(inputs, outputs), same inputs, outputs preallocated;
- modelnew: a KernelBench ModelNew file, built like Model and called like it.

Every kind is called as call(inputs) -> list of outputs; native and run candidates write into
preallocated outputs, which the caller poisons before each call."""
from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from . import task as taskmod

_ABI_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3, torch.int32: 4,
               torch.int64: 5, torch.int8: 6, torch.uint8: 7, torch.bool: 8}


class CandidateError(Exception):
    """The candidate cannot be loaded or called: (disposition, detail)."""

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind, self.detail = kind, detail


class _KfabTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64))]


def _views(tensors: list):
    """kfab_tensor array for torch tensors; the shape and stride arrays are kept alive with it."""
    arr = (_KfabTensor * max(1, len(tensors)))()
    keep = []
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise CandidateError("runtime_failed", f"input {i} is a {type(t).__name__}: a native candidate takes tensors only")
        if t.dtype not in _ABI_DTYPES:
            raise CandidateError("runtime_failed", f"input {i} has dtype {t.dtype}, which the native ABI lacks")
        shape = (ctypes.c_int64 * max(1, t.dim()))(*t.shape)
        strides = (ctypes.c_int64 * max(1, t.dim()))(*t.stride())
        keep += [shape, strides]
        arr[i].data = t.data_ptr()
        arr[i].dtype = _ABI_DTYPES[t.dtype]
        arr[i].ndim = t.dim()
        arr[i].shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        arr[i].strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    return arr, keep


def as_abi_input(x, device: str, kept: dict):
    """What kfab_run gets for an input: a tensor as it is; a Python int or float (KernelBench's level1/5
    passes A and a float s) as a 0-dim tensor on `device`, int64 or float32 (an addition to the candidate
    ABI), made once per value and kept in `kept`, so that timed calls copy nothing."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return x
    key = (type(x), x)
    if key not in kept:
        kept[key] = torch.tensor(x, dtype=torch.float32 if isinstance(x, float) else torch.int64, device=device)
    return kept[key]


def _current_stream() -> int:
    """torch's current CUDA stream as a raw handle: torch's own quick accessor (the one its generated
    code uses) where there is one; a Stream object costs microseconds of the call's host time."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(torch.cuda.current_device()) if raw is not None else torch.cuda.current_stream().cuda_stream


class Candidate:
    kind = ""
    preallocated = True  # outputs are given to it (native, run), not returned (modelnew)

    def setup(self, model: torch.nn.Module, device: str, dtype: torch.dtype) -> None:
        self.params = taskmod.params_and_buffers(model)

    def init(self, scalars: list) -> None:
        """The Model's numeric constructor arguments at this shape (see kfab_init in candidate.h)."""

    def __call__(self, inputs: list, outputs: list | None):
        raise NotImplementedError


class Native(Candidate):
    kind = "native"

    def __init__(self, path: str, device: str):
        try:
            self.lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        except OSError as e:
            raise CandidateError("compile_failed", f"cannot load {path}: {e}") from e
        try:
            self.fn = self.lib.kfab_run
        except AttributeError as e:
            raise CandidateError("compile_failed", "the shared object does not export kfab_run (declare it with KFAB_EXPORT)") from e
        self.fn.restype = ctypes.c_int
        self.fn.argtypes = [ctypes.POINTER(_KfabTensor), ctypes.c_int32, ctypes.POINTER(_KfabTensor), ctypes.c_int32,
                            ctypes.c_void_p]
        self.device = device
        self._numbers: dict = {}  # the 0-dim tensors of Python number inputs, by value

    def init(self, scalars: list) -> None:
        try:
            fn = self.lib.kfab_init
        except AttributeError:
            return  # optional
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.POINTER(ctypes.c_double), ctypes.c_int32]
        arr = (ctypes.c_double * max(1, len(scalars)))(*scalars)
        rc = fn(arr, len(scalars))
        if rc != 0:
            raise CandidateError("runtime_failed", f"kfab_init returned {rc}")

    def __call__(self, inputs, outputs):
        all_in = [as_abi_input(x, self.device, self._numbers) for x in inputs] + self.params
        # The kfab_tensor arrays of the same tensors are made once: timed calls repeat them.
        key = tuple((t.data_ptr(), tuple(t.shape), t.stride(), t.dtype) if isinstance(t, torch.Tensor) else id(t)
                    for t in all_in + list(outputs))
        if getattr(self, "_key", None) != key:
            self._views = (_views(all_in), _views(outputs))
            self._key = key
        (ins, _), (outs, _) = self._views
        stream = _current_stream() if self.device == "cuda" else None
        rc = self.fn(ins, len(all_in), outs, len(outputs), stream)
        if rc != 0:
            raise CandidateError("runtime_failed", f"kfab_run returned {rc}")
        return outputs


class RunModule(Candidate):
    kind = "run"

    def __init__(self, path: str):
        mod = taskmod.load_module(Path(path), "kfab_candidate")
        self.run = getattr(mod, "run", None)
        if not callable(self.run):
            raise CandidateError("compile_failed", f"{path} defines no run(inputs, outputs)")

    def __call__(self, inputs, outputs):
        self.run(list(inputs) + self.params, outputs)
        return outputs


class ModelNew(Candidate):
    kind = "modelnew"
    preallocated = False

    def __init__(self, path: str, task: taskmod.KbTask):
        self.mod = taskmod.load_module(Path(path), "kfab_candidate")
        if not hasattr(self.mod, "ModelNew"):
            raise CandidateError("compile_failed", f"{path} defines no ModelNew")
        self.task = task

    def setup(self, model, device, dtype):
        self.params = []
        torch.manual_seed(taskmod.WEIGHT_SEED)
        try:
            m = self.mod.ModelNew(*self.task.mod.get_init_inputs())
        except Exception as e:  # noqa: BLE001
            raise CandidateError("runtime_failed", f"ModelNew(*get_init_inputs()) raised {type(e).__name__}: {e}") from e
        # The reference's weights, wherever the names agree: both draw them from one seed anyway.
        try:
            m.load_state_dict(model.state_dict(), strict=False)
        except Exception:  # noqa: BLE001 - differently shaped parameters keep their seeded values
            pass
        m = m.to(device)
        if dtype != torch.float32:
            m = m.to(dtype)
        self.model = taskmod.kernelbench_mode(m)

    def __call__(self, inputs, outputs):
        return taskmod.as_list(self.model(*inputs))


def kind_of(path: str) -> str:
    """native for a shared object; modelnew for a file defining ModelNew; run otherwise."""
    if path.endswith(".so"):
        return "native"
    text = Path(path).read_text()
    return "modelnew" if "class ModelNew" in text else "run"


def load(path: str, task: taskmod.KbTask, device: str) -> Candidate:
    k = kind_of(path)
    if k == "native":
        return Native(path, device)
    try:
        return ModelNew(path, task) if k == "modelnew" else RunModule(path)
    except taskmod.TaskError as e:
        raise CandidateError("compile_failed", str(e).replace("importing it raised", "importing the candidate raised")) from e
