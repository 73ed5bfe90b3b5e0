"""A KernelBench-format task file, read unmodified: `Model`, `get_inputs()`, `get_init_inputs()` and
module-level constants. kfab's own tasks may add KFAB_* metadata (tasks/kb/FORMAT.md): KFAB_GPU,
KFAB_HELDOUT, KFAB_FORBIDDEN, KFAB_TOLERANCE, KFAB_COST, KFAB_OP_CLASS."""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import torch

WEIGHT_SEED = 42  # the model's parameters are drawn once, with this seed, for every candidate

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64}
DTYPE_NAMES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
               torch.int32: "i32", torch.int64: "i64", torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool"}
DTYPES_BY_NAME = {v: k for k, v in DTYPE_NAMES.items()}
# KernelBench's own tolerances (atol, rtol) for the dtype in use: fp32 1e-4 and 1e-4, fp16 and bf16 1e-2
# (f64, which KernelBench does not run, as fp32).
DEFAULT_TOL = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-4, 1e-4), torch.float16: (1e-2, 1e-2),
               torch.bfloat16: (1e-2, 1e-2)}

# Several input distributions: seed k's float inputs are scaled by SCALES[k % len]. A scale that makes
# the reference produce NaN or Inf where the unscaled inputs did not is not used for that task.
SCALES = (1.0, 1.0, 2.0, 0.5, 1.0)


class TaskError(Exception):
    """The task file is at fault (it does not import, lacks Model, its reference fails)."""


def load_module(path: Path, prefix: str):
    text = path.read_bytes()
    name = f"{prefix}_{hashlib.sha256(text).hexdigest()[:16]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, str(path))
    if spec is None or spec.loader is None:
        raise TaskError(f"{path}: cannot be imported as a Python module")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001 - any failure of a task file is the task's
        del sys.modules[name]
        raise TaskError(f"{path}: importing it raised {type(e).__name__}: {e}") from e
    return mod


def _is_symbol(k: str, v) -> bool:
    return (not k.startswith("_") and not k.startswith("KFAB_") and isinstance(v, (int, float))
            and not isinstance(v, bool))


class KbTask:
    def __init__(self, path: str):
        self.path = Path(path).resolve()
        self.source = self.path.read_text()
        self.mod = load_module(self.path, "kfab_task")
        for need in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(self.mod, need):
                raise TaskError(f"{self.path}: defines no {need} (a KernelBench file has Model, get_inputs and get_init_inputs)")
        self.defaults = {k: v for k, v in vars(self.mod).items() if _is_symbol(k, v)}
        meta = vars(self.mod)
        self.gpu = dict(meta.get("KFAB_GPU", {}) or {})
        self.heldout = [dict(h) for h in (meta.get("KFAB_HELDOUT", []) or [])]
        self.forbidden = [str(f) for f in (meta.get("KFAB_FORBIDDEN", []) or [])]
        self.tolerance = dict(meta.get("KFAB_TOLERANCE", {}) or {})
        self.cost = dict(meta.get("KFAB_COST", {}) or {})
        self.op_class = str(meta.get("KFAB_OP_CLASS", ""))
        for name, over in [("KFAB_GPU", self.gpu)] + [("KFAB_HELDOUT", h) for h in self.heldout]:
            for k in over:
                if k not in self.defaults:
                    raise TaskError(f"{self.path}: {name} overrides {k!r}, which is not a module-level constant "
                                    f"(constants: {', '.join(sorted(self.defaults)) or 'none'})")
        self._bad_scales: set[float] = set()

    # -- shapes ---------------------------------------------------------------------------------
    def shape_symbols(self, overrides: dict) -> dict:
        """The integer constants in effect with `overrides`: what a verdict shows as the shape."""
        s = {k: v for k, v in self.defaults.items() if isinstance(v, int)}
        s.update({k: v for k, v in overrides.items() if isinstance(v, int)})
        return s

    def apply(self, overrides: dict) -> None:
        for k, v in self.defaults.items():
            setattr(self.mod, k, v)
        for k, v in overrides.items():
            setattr(self.mod, k, v)

    # -- model and inputs -----------------------------------------------------------------------
    def model(self, overrides: dict, device: str | None, dtype: torch.dtype) -> torch.nn.Module:
        """The Model at `overrides`, its weights drawn after torch.manual_seed(WEIGHT_SEED), on `device`
        (None: where it was made, as under a FakeTensorMode, whose tensors cannot be moved)."""
        self.apply(overrides)
        torch.manual_seed(WEIGHT_SEED)
        try:
            m = self.mod.Model(*self.mod.get_init_inputs())
        except Exception as e:  # noqa: BLE001
            raise TaskError(f"{self.path}: Model(*get_init_inputs()) raised {type(e).__name__}: {e}") from e
        if device is not None:
            m = m.to(device)
        if dtype != torch.float32:
            m = m.to(dtype)
        return kernelbench_mode(m)

    def inputs(self, overrides: dict, seed: int, device: str | None, dtype: torch.dtype, scale: float = 1.0) -> list:
        """get_inputs() after torch.manual_seed(seed), made on `device` (None: where get_inputs makes them,
        as under a FakeTensorMode). On a GPU, torch's factory functions run there (torch.device as the
        default device): the same calls and seed as KernelBench's, drawn by the GPU's generator instead of
        the CPU's (other values, the same distributions), in milliseconds and no host memory; a tensor
        get_inputs puts on the CPU by name is moved."""
        self.apply(overrides)
        torch.manual_seed(seed)
        try:
            if device is not None and device != "cpu":
                with torch.device(device):
                    xs = list(self.mod.get_inputs())
            else:
                xs = list(self.mod.get_inputs())
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as e:  # noqa: BLE001
            raise TaskError(f"{self.path}: get_inputs() raised {type(e).__name__}: {e}") from e
        out = []
        for i in range(len(xs)):
            x = xs[i]
            if isinstance(x, torch.Tensor):
                if device is not None:
                    x = x.to(device)
                if x.is_floating_point():
                    if dtype != torch.float32:
                        x = x.to(dtype)
                    if scale != 1.0:
                        if _private(x, xs[i]):
                            # in place: a second copy of a 16 GB input is what runs a GPU out of memory
                            with torch.no_grad():  # a leaf that requires grad may be changed in place here
                                x.mul_(scale)
                        else:  # get_inputs keeps it elsewhere too (or returns it twice): left as it is
                            x = x * scale
                x = x.contiguous()
            out.append(x)
        return out

    def init_scalars(self, overrides: dict) -> list:
        """get_init_inputs() at `overrides` as numbers, nested lists flattened, anything else NaN."""
        self.apply(overrides)
        try:
            args = list(self.mod.get_init_inputs())
        except Exception as e:  # noqa: BLE001
            raise TaskError(f"{self.path}: get_init_inputs() raised {type(e).__name__}: {e}") from e
        out = []

        def walk(v):
            if isinstance(v, (list, tuple)):
                for x in v:
                    walk(x)
            elif isinstance(v, (bool, int, float)):
                out.append(float(v))
            else:
                out.append(float("nan"))
        walk(args)
        return out

    def scale_for(self, seed_index: int) -> float:
        s = SCALES[seed_index % len(SCALES)]
        return 1.0 if s in self._bad_scales else s

    def reject_scale(self, s: float) -> None:
        self._bad_scales.add(s)

    def tol(self, dtype: torch.dtype, override: dict | None = None) -> tuple[float, float]:
        """(atol, rtol): the command line's (--atol, --rtol), else the file's KFAB_TOLERANCE, else
        KernelBench's default for the dtype; each of the two on its own."""
        return self.tol_with_source(dtype, override)[:2]

    def tol_with_source(self, dtype: torch.dtype, override: dict | None = None) -> tuple[float, float, str]:
        atol, rtol = DEFAULT_TOL.get(dtype, (0.0, 0.0))
        said = [f"KernelBench's default for {str(dtype).replace('torch.', '')}"]
        if self.tolerance:
            atol, rtol = float(self.tolerance.get("atol", atol)), float(self.tolerance.get("rtol", rtol))
            said.append("the file's KFAB_TOLERANCE")
        if override:
            if override.get("atol") is not None:
                atol = float(override["atol"])
            if override.get("rtol") is not None:
                rtol = float(override["rtol"])
            said.append("--atol/--rtol")
        return float(atol), float(rtol), said[-1] if len(said) == 1 else " over ".join(reversed(said))

    def describe(self) -> dict:
        return {"symbols": self.shape_symbols({}), "gpu": self.gpu, "heldout": self.heldout,
                "forbidden": self.forbidden, "tolerance": self.tolerance, "cost": self.cost,
                "op_class": self.op_class}


def _private(x: torch.Tensor, returned) -> bool:
    """Whether `x` belongs to this call alone, so that changing it in place changes nothing get_inputs
    keeps (a tensor held at module level, in a closure or returned twice): a copy made here (moved,
    cast), or what get_inputs returned with no other reference than the returned list's, this
    function's and the caller's (CPython's reference counts), and no view of another tensor."""
    if x is not returned:
        return True
    # references: the returned list's slot, the caller's `x`, this call's `x` and `returned`, and
    # getrefcount's own argument
    return x._base is None and sys.getrefcount(x) <= 5


def as_list(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return list(out)
    return [out]


def kernelbench_mode(m: torch.nn.Module) -> torch.nn.Module:
    """The mode KernelBench's harness runs a Model in: as constructed, in training mode (a BatchNorm
    normalises with the batch's statistics), except that dropout layers are put in eval mode, so that
    the reference is deterministic and can be checked (a random one cannot)."""
    m.train()
    for mod in m.modules():
        if isinstance(mod, (torch.nn.modules.dropout._DropoutNd, torch.nn.AlphaDropout, torch.nn.FeatureAlphaDropout)):
            mod.eval()
    return m


def params_and_buffers(model: torch.nn.Module) -> list:
    """DESIGN.md 2.1: a native candidate's inputs are get_inputs() then these."""
    return [p.detach() for _, p in model.named_parameters()] + [b.detach() for _, b in model.named_buffers()]
