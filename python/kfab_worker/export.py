"""`kfab export CANDIDATE --task TASK.py --modelnew FILE`: a KernelBench ModelNew file for a native
(.cpp, .cu) or Triton/Python run() candidate, which a plain KernelBench-style evaluation (import the
file, build ModelNew(*get_init_inputs()), compare with allclose, time with events) accepts as it is.

The file carries the task's source and the candidate's source. ModelNew subclasses the task's Model
(same parameters, drawn the same way from the same seed); forward() takes output shapes from a copy of
Model on the meta device and calls the candidate: a native one through kfab_run (built on first use
with the same compiler line as kfab, cached by content hash), called through a compiled torch
extension (modelnew_abi.cpp, built once per machine and torch and loaded like any extension; no ctypes
per call); a run() one directly. No torch import here: this only writes text.

  python3 -m kfab_worker.export --task TASK.py --candidate FILE --header include/kfab/candidate.h --out FILE
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

TEMPLATE = '''# ModelNew written by `kfab export` for the task {task_name} from the candidate {cand_name}
# ({kind}, sha256 {cand_hash}). It subclasses the task's Model, so its parameters are the Model's, and
# its forward() calls the candidate on get_inputs() followed by the parameters and buffers
# (named_parameters() then named_buffers()), with outputs shaped by a meta-device copy of Model.
import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import torch

_TASK_SOURCE = {task_source}
_CANDIDATE_SOURCE = {cand_source}
_HEADER_SOURCE = {header_source}
_EXTENSION_SOURCE = {extension_source}
_KIND = {kind!r}
_CACHE = Path(os.environ.get("KFAB_EXPORT_CACHE", Path.home() / ".cache" / "kfab" / "export"))


def _materialize(name, source, suffix):
    d = _CACHE / hashlib.sha256((name + source).encode()).hexdigest()[:16]
    d.mkdir(parents=True, exist_ok=True)
    path = d / (name + suffix)
    if not path.exists() or path.read_text() != source:
        tmp = path.with_suffix(suffix + ".tmp")
        tmp.write_text(source)
        tmp.replace(path)
    return path


def _import(name, source):
    # From a real file: Triton reads its kernels' source back with inspect.
    path = _materialize(name, source, ".py")
    modname = "_kfab_" + name + "_" + hashlib.sha256(source.encode()).hexdigest()[:12]
    if modname in sys.modules:
        return sys.modules[modname]
    spec = importlib.util.spec_from_file_location(modname, str(path))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    return mod


_task = _import("task", _TASK_SOURCE)


_native = None
_extension = None


def _import_built(path):
    # a built extension, imported as it is (its module name is its file's)
    spec = importlib.util.spec_from_file_location(path.name.split(".")[0], str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load_extension(include):
    """The torch extension that calls native candidates (modelnew_abi.cpp), built on first use into the
    cache, per its source, the ABI header, torch and Python."""
    global _extension
    if _extension is None and os.environ.get("KFAB_MODELNEW_EXTENSION"):  # built already (kfab eval)
        _extension = _import_built(Path(os.environ["KFAB_MODELNEW_EXTENSION"]))
    if _extension is None:
        from torch.utils import cpp_extension

        key = hashlib.sha256((_EXTENSION_SOURCE + _HEADER_SOURCE + torch.__version__ + sys.version).encode()).hexdigest()[:16]
        build = _CACHE / ("extension-" + key)
        built = build / ("kfab_modelnew_abi_" + key + ".so")
        if built.exists():  # built before (or by `kfab eval` for this machine)
            _extension = _import_built(built)
            return _extension
        build.mkdir(parents=True, exist_ok=True)
        src = build / "kfab_modelnew_abi.cpp"
        if not src.exists() or src.read_text() != _EXTENSION_SOURCE:
            src.write_text(_EXTENSION_SOURCE)
        _extension = cpp_extension.load(name="kfab_modelnew_abi_" + key, sources=[str(src)],
                                        extra_include_paths=[str(include)], extra_cflags=["-O2"],
                                        build_directory=str(build), verbose=False)
    return _extension


def _cutlass_include():
    """CUTLASS's headers for a candidate built on them: $KFAB_CUTLASS_INCLUDE, else the nvidia-cutlass
    package's (pip install nvidia-cutlass)."""
    given = os.environ.get("KFAB_CUTLASS_INCLUDE")
    if given:
        return given
    try:
        import cutlass_library
    except ImportError:
        raise RuntimeError("this ModelNew's kernel is built on CUTLASS, whose headers are not here: pip install nvidia-cutlass "
                           "(or set KFAB_CUTLASS_INCLUDE to a folder holding cutlass/cutlass.h)") from None
    return os.path.join(os.path.dirname(cutlass_library.__file__), "source", "include")


def _build_native():
    global _native
    if _native is not None:
        return _native
    if os.environ.get("KFAB_MODELNEW_LIBRARY") and os.environ.get("KFAB_MODELNEW_EXTENSION"):
        # kfab's own builds of this candidate and of the extension (kfab eval's end-to-end timing)
        ext = _load_extension(None)
        _native = (ext, ext.load(os.environ["KFAB_MODELNEW_LIBRARY"]))
        return _native
    src = _materialize("candidate", _CANDIDATE_SOURCE, ".cu" if _KIND == "cuda" else ".cpp")
    include = src.parent / "include"
    (include / "kfab").mkdir(parents=True, exist_ok=True)
    header = include / "kfab" / "candidate.h"
    if not header.exists() or header.read_text() != _HEADER_SOURCE:
        header.write_text(_HEADER_SOURCE)
    so = src.with_suffix(".so")
    if not so.exists():
        if _KIND == "cuda":
            cmd = [os.environ.get("NVCC", "nvcc"), "-std=c++17", "-O3", "-shared", "-Xcompiler", "-fPIC",
                   "-arch=sm_%d%d" % torch.cuda.get_device_capability() + ("a" if torch.cuda.get_device_capability() == (9, 0) else ""),
                   "-I", str(include), str(src), "-o", str(so) + ".tmp"]
            if "cublas_v2.h" in _CANDIDATE_SOURCE:
                cmd.append("-lcublas")
            if any(("#include " + q + lib + "/") in _CANDIDATE_SOURCE for q in '"<' for lib in ("cutlass", "cute")):
                cmd += ["-I", _cutlass_include(), "--expt-relaxed-constexpr"]
        else:
            cmd = [os.environ.get("CXX", "g++"), "-std=c++20", "-O3", "-march=native", "-fopenmp", "-fno-trapping-math", "-shared", "-fPIC",
                   "-I", str(include), str(src), "-o", str(so) + ".tmp"]
            if "#include <cblas.h>" in _CANDIDATE_SOURCE:
                cmd.append("-lopenblas")
        subprocess.run(cmd, check=True)
        os.replace(str(so) + ".tmp", so)
    ext = _load_extension(include)
    _native = (ext, ext.load(str(so)))
    return _native


_initialised = None  # the init numbers kfab_init was last called with


def _numbers(v, out):
    if isinstance(v, (list, tuple)):
        for x in v:
            _numbers(x, out)
    else:
        out.append(float(v) if isinstance(v, (bool, int, float)) else float("nan"))
    return out


class ModelNew(_task.Model):
    def __init__(self, *init_inputs):
        super().__init__(*init_inputs)
        self.__dict__["_init"] = _numbers(list(init_inputs), [])
        with torch.device("meta"):
            self.__dict__["_shapes"] = _task.Model(*init_inputs)
        self.__dict__["_run"] = None if _KIND in ("cuda", "cpp") else _import("candidate", _CANDIDATE_SOURCE).run

    def forward(self, *inputs):
        # The host side of this call is timed with the kernel (KernelBench's events wait for it), so
        # everything that can be is worked out once per input signature and kept.
        key = tuple((x.shape, x.dtype, x.device) if isinstance(x, torch.Tensor) else x for x in inputs)
        plans = self.__dict__.setdefault("_plans", {{}})
        params = [p.detach() for p in self.parameters()] + [b.detach() for b in self.buffers()]
        key = (key, next((p.dtype for p in params if p.is_floating_point()), None))
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = self._plan(inputs, params)
        single, metas, device, stream, numbers = plan
        outs = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in metas]
        ins = [x.contiguous() if isinstance(x, torch.Tensor) else numbers.get(i, x) for i, x in enumerate(inputs)] + params
        if self._run is not None:
            self._run(ins, outs)
        else:
            ext, lib = _native
            global _initialised
            if _initialised != self._init:  # kfab_init is optional: see candidate.h
                rc = ext.init(lib, self._init)
                if rc != 0:
                    raise RuntimeError("kfab_init returned %d" % rc)
            _initialised = self._init
            rc = ext.run(lib, ins, outs, stream())
            if rc != 0:
                raise RuntimeError("kfab_run returned %d" % rc)
        return outs[0] if single else tuple(outs)

    def _plan(self, inputs, params):
        """(single output?, the outputs' shapes and dtypes, their device, the current stream's getter, the
        Python number inputs as the 0-dim tensors a native candidate takes) for inputs like these: the
        outputs from a meta-device copy of Model, run once."""
        floats = [p.dtype for p in params if p.is_floating_point()]
        shapes = self._shapes.to(floats[0]) if floats else self._shapes
        with torch.no_grad():
            meta = shapes(*[x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs])
        single = isinstance(meta, torch.Tensor)
        metas = [(m.shape, m.dtype) for m in ([meta] if single else list(meta))]
        device = next(x.device for x in inputs if isinstance(x, torch.Tensor))
        numbers = {{}}
        if self._run is None:
            _build_native()
            # an int or a float input (the key holds its value): int64 or float32, as kfab's worker passes it
            numbers = {{i: torch.tensor(x, dtype=torch.float32 if isinstance(x, float) else torch.int64, device=device)
                       for i, x in enumerate(inputs) if isinstance(x, (int, float)) and not isinstance(x, bool)}}
        if device.type != "cuda":
            return single, metas, device, lambda: 0, numbers
        index = device.index if device.index is not None else torch.cuda.current_device()
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # torch's quick accessor, as its generated code uses
        return single, metas, device, ((lambda: raw(index)) if raw is not None
                                       else (lambda: torch.cuda.current_stream(index).cuda_stream)), numbers

        return outs[0] if single else tuple(outs)
'''


def modelnew_source(task: Path, candidate: Path, header: Path) -> str:
    cand = candidate.read_text()
    name = candidate.name
    if name.endswith(".cu"):
        kind = "cuda"
    elif name.endswith(".cpp") and not name.endswith(".cl.cpp"):
        kind = "cpp"
    elif name.endswith(".py") and "def run(" in cand and "class ModelNew" not in cand:
        kind = "triton" if "triton" in cand else "python"
    else:
        raise ValueError(f"{candidate}: export takes a .cpp, .cu or run() .py candidate (a ModelNew file is one already)")
    return TEMPLATE.format(task_name=task.stem, cand_name=name, kind=kind,
                           cand_hash=hashlib.sha256(cand.encode()).hexdigest()[:16],
                           task_source=repr(task.read_text()), cand_source=repr(cand),
                           header_source=repr(header.read_text()),
                           extension_source=repr((Path(__file__).parent / "modelnew_abi.cpp").read_text()))


def build_extension(cache: Path, header: Path) -> Path:
    """Builds the torch extension of exported ModelNews (modelnew_abi.cpp) into `cache` as an exported
    ModelNew would on first use (the same folder and name, so that ModelNews find it built); returns
    the library."""
    mod = {"__name__": "kfab_modelnew_build"}
    os.environ["KFAB_EXPORT_CACHE"] = str(cache)
    # The exported file's own code builds it: one formula for the folder and the name.
    text = TEMPLATE.split("_task = _import(")[0].format(
        task_name="", cand_name="", kind="cpp", cand_hash="", task_source=repr(""), cand_source=repr(""),
        header_source=repr(header.read_text()),
        extension_source=repr((Path(__file__).parent / "modelnew_abi.cpp").read_text()))
    text += "\n" + TEMPLATE[TEMPLATE.index("_native = None"):TEMPLATE.index("def _build_native")].format()
    exec(compile(text, "kfab_modelnew_build", "exec"), mod)  # noqa: S102 - kfab's own template
    include = cache / "include"
    (include / "kfab").mkdir(parents=True, exist_ok=True)
    (include / "kfab" / "candidate.h").write_text(header.read_text())
    ext = mod["_load_extension"](include)
    return Path(ext.__file__)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="kfab_worker.export")
    p.add_argument("--task")
    p.add_argument("--candidate")
    p.add_argument("--header", required=True)
    p.add_argument("--out")
    p.add_argument("--build-extension", metavar="CACHE", help="build the ModelNew extension into CACHE and exit")
    a = p.parse_args(argv)
    if a.build_extension:
        try:
            print(build_extension(Path(a.build_extension), Path(a.header)))
        except Exception as e:  # noqa: BLE001 - said, not raised
            print(f"kfab export: the ModelNew extension does not build: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        return 0
    if not (a.task and a.candidate and a.out):
        p.error("--task, --candidate and --out are needed")
    try:
        text = modelnew_source(Path(a.task), Path(a.candidate), Path(a.header))
    except (OSError, ValueError) as e:
        print(f"kfab export: {e}", file=sys.stderr)
        return 2
    out = Path(a.out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
