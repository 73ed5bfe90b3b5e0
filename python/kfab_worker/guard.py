"""Checks against cheating for Python candidates (Triton `run` modules and ModelNew files).

Static, on the source (ast): no timers, no harness or interpreter tampering, no threads or processes,
no foreign code loading, and no call of an operation the task forbids. At run time: the torch
functions and aten operators a call reaches are recorded (TorchFunctionMode, TorchDispatchMode) and
checked against the forbidden list, and the threads and child processes of the worker are counted
before and after the call."""
from __future__ import annotations

import ast
import os
import threading

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# Modules a candidate may not import: timing, concurrency, processes, the interpreter's internals.
BANNED_MODULES = {
    "time": "timers", "timeit": "timers", "threading": "threads", "_thread": "threads",
    "multiprocessing": "processes", "concurrent": "threads or processes", "subprocess": "processes",
    "signal": "signal handlers", "ctypes": "foreign code", "cffi": "foreign code", "gc": "the interpreter's objects",
    "inspect": "the interpreter's frames", "sys": "the interpreter", "importlib": "module loading",
    "builtins": "the builtins", "atexit": "exit handlers", "socket": "the network", "kfab_worker": "the harness",
    "pickle": "code loading", "marshal": "code loading", "shutil": "files", "asyncio": "concurrency",
}
# Attributes whose use means timing or tampering, whatever the import.
BANNED_ATTRS = {
    "Event": "CUDA events (the harness's timer)", "elapsed_time": "the harness's timer",
    "perf_counter": "timers", "synchronize": "synchronization (the harness's job)", "fork": "processes",
    "system": "processes", "popen": "processes", "spawn": "processes", "settrace": "tracing",
    "setprofile": "profiling", "__subclasses__": "the interpreter's objects", "__globals__": "the interpreter",
    "__builtins__": "the builtins", "_getframe": "the interpreter's frames", "set_flush_denormal": "float modes",
}
BANNED_CALLS = {"exec": "dynamic code", "eval": "dynamic code", "compile": "dynamic code",
                "__import__": "module loading", "globals": "the interpreter", "setattr": "patching objects",
                "open": "files"}


def forbidden_names(forbidden: list[str]) -> tuple[set[str], set[str]]:
    """("torch.nn.functional.softmax", "aten._softmax") -> function names {"softmax"}, aten names {"_softmax"}."""
    funcs, atens = set(), set()
    for f in forbidden:
        if f.startswith("aten."):
            atens.add(f.split(".", 1)[1].split(".")[0])
        else:
            funcs.add(f.rsplit(".", 1)[-1])
    return funcs, atens


def static_check(source: str, filename: str, forbidden: list[str]) -> str | None:
    """Why the source may not run, or None."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as e:
        return f"{filename}:{e.lineno}: syntax error: {e.msg}"
    funcs, _ = forbidden_names(forbidden)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for n in names:
                root = n.split(".")[0]
                if root in BANNED_MODULES:
                    return f"{filename}:{line}: imports {n}: a candidate may not use {BANNED_MODULES[root]}"
                if n in ("os",) and isinstance(node, ast.ImportFrom):
                    for a in node.names:
                        if a.name in BANNED_ATTRS:
                            return f"{filename}:{line}: imports os.{a.name} ({BANNED_ATTRS[a.name]})"
        elif isinstance(node, ast.Attribute):
            if node.attr in BANNED_ATTRS:
                return f"{filename}:{line}: uses .{node.attr} ({BANNED_ATTRS[node.attr]})"
            if node.attr in funcs:
                # torch.softmax, F.softmax, x.softmax: the forbidden operation itself (tl.softmax is Triton's own)
                base = node.value
                if not (isinstance(base, ast.Name) and base.id in ("tl", "triton")):
                    return f"{filename}:{line}: calls {node.attr}, which this task forbids (it is the operation to replace)"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in BANNED_CALLS:
                return f"{filename}:{line}: calls {node.func.id}() ({BANNED_CALLS[node.func.id]})"
        elif isinstance(node, ast.Name) and node.id in funcs and isinstance(node.ctx, ast.Load):
            # from torch.nn.functional import softmax; softmax(x)
            pass
    return None


class _FunctionRecorder(TorchFunctionMode):
    def __init__(self, names: set[str], seen: list[str]):
        super().__init__()
        self.names, self.seen = names, seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.names:
            self.seen.append(f"{getattr(func, '__module__', None) or 'torch'}.{name}")
        return func(*args, **(kwargs or {}))


class _DispatchRecorder(TorchDispatchMode):
    def __init__(self, names: set[str], seen: list[str]):
        super().__init__()
        self.names, self.seen = names, seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = getattr(func, "overloadpacket", None)
        name = getattr(packet, "__name__", "") if packet is not None else ""
        if name in self.names:
            self.seen.append(f"aten.{name}")
        return func(*args, **(kwargs or {}))


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _children() -> list[int]:
    me = os.getpid()
    kids = []
    try:
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/children") as f:
                    kids += [int(p) for p in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return [k for k in kids if k != me]


class Watch:
    """Runs a call with the forbidden-operation recorders on, and counts threads and children."""

    def __init__(self, forbidden: list[str]):
        self.funcs, self.atens = forbidden_names(forbidden)

    def call(self, fn, check_threads: bool):
        seen: list[str] = []
        threads0, kids0 = _threads(), set(_children())
        if self.funcs or self.atens:
            with _FunctionRecorder(self.funcs, seen), _DispatchRecorder(self.atens, seen):
                result = fn()
        else:
            result = fn()
        if seen:
            return result, f"called {seen[0]}, which this task forbids (it is the operation to replace)"
        kids = set(_children()) - kids0
        if kids:
            return result, f"started {len(kids)} process(es) (pid {sorted(kids)[0]})"
        if check_threads and _threads() > threads0:
            return result, f"left {_threads() - threads0} new thread(s) running after the call"
        return result, None


# What the harness times and judges with: a candidate that replaces one of these (through vars(), a
# module's __dict__, a class's attribute) changes the measurement or the verdict, not the work.
_TIMERS = [("time", n) for n in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "sleep")]
_TORCH_ATTRS = [("torch", n) for n in ("allclose", "isclose", "equal", "isnan", "isfinite", "where", "abs", "empty_like",
                                        "zeros", "ones", "full", "randn", "rand", "no_grad", "as_tensor", "tensor")]
_CUDA_ATTRS = [("torch.cuda", n) for n in ("synchronize", "Event", "current_stream", "Stream", "is_available",
                                             "get_device_name", "default_stream")]
_CLASS_ATTRS = [(torch.Tensor, n) for n in ("clone", "copy_", "fill_", "float", "double", "to", "cpu", "detach",
                                             "__eq__", "__sub__", "abs", "isnan", "isfinite", "all", "any", "max", "item",
                                             "numel", "view", "reshape", "contiguous", "is_floating_point")]
_CLASS_ATTRS += [(torch.cuda.Event, n) for n in ("record", "elapsed_time", "synchronize", "query", "wait")]
_BUILTINS = ("float", "int", "max", "min", "abs", "len", "isinstance", "sorted", "sum", "range", "zip", "enumerate")


def _fingerprint(obj) -> tuple:
    code = getattr(obj, "__code__", None)
    return (id(obj), id(code) if code is not None else 0)


class Integrity:
    """A record of the harness's functions and the timers, taken when the worker starts (before any
    candidate is loaded), and checked after candidate calls: `quick` (the timers, cheap enough for
    every timed call) and `full` (every function of the harness's modules too)."""

    def __init__(self, harness_modules: list[str]):
        import builtins  # noqa: PLC0415
        import sys  # noqa: PLC0415

        self._sys = sys
        self._builtins = builtins
        self.quick_items = self._module_items(_TIMERS + _CUDA_ATTRS[:1]) + self._class_items(_CLASS_ATTRS[-5:])
        self.full_items = (self.quick_items + self._module_items(_TORCH_ATTRS + _CUDA_ATTRS) +
                           self._class_items(_CLASS_ATTRS) +
                           [("builtins." + n, (lambda n=n: getattr(builtins, n)), _fingerprint(getattr(builtins, n)))
                            for n in _BUILTINS])
        for m in harness_modules:
            mod = sys.modules.get(m)
            if mod is None:
                continue
            for name, value in list(vars(mod).items()):
                if callable(value) and not name.startswith("__"):
                    self.full_items.append((f"{m}.{name}", (lambda mod=mod, name=name: vars(mod).get(name)), _fingerprint(value)))
                    if isinstance(value, type):  # the harness's classes: their methods too
                        for attr, member in list(vars(value).items()):
                            if callable(member) and not attr.startswith("__"):
                                self.full_items.append((f"{m}.{name}.{attr}",
                                                        (lambda value=value, attr=attr: vars(value).get(attr)),
                                                        _fingerprint(member)))

    def _module_items(self, pairs):
        items = []
        for mod_name, attr in pairs:
            mod = self._sys.modules.get(mod_name)
            if mod is None or not hasattr(mod, attr):
                continue
            items.append((f"{mod_name}.{attr}", (lambda mod=mod, attr=attr: vars(mod).get(attr)), _fingerprint(getattr(mod, attr))))
        return items

    def _class_items(self, pairs):
        items = []
        for cls, attr in pairs:
            if attr not in vars(cls) and not hasattr(cls, attr):
                continue
            items.append((f"{cls.__module__}.{cls.__name__}.{attr}", (lambda cls=cls, attr=attr: getattr(cls, attr, None)),
                          _fingerprint(getattr(cls, attr))))
        return items

    @staticmethod
    def _changed(items) -> str | None:
        for name, get, fp in items:
            if _fingerprint(get()) != fp:
                return f"replaced {name}, which the harness times or judges with"
        return None

    def quick(self) -> str | None:
        return self._changed(self.quick_items)

    def full(self) -> str | None:
        return self._changed(self.full_items)
