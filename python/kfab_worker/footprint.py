"""What a KernelBench problem needs, found on fake tensors (no memory, no computation): the bytes of its
inputs, weights and outputs and the flops torch's FlopCounterMode counts in one forward. kfab sizes
its job deadlines from these, and a worker checks them against the device's free memory before it
makes a problem's tensors: a problem that cannot fit is refused with the figures, never left to end
in an OutOfMemoryError that reads like something else."""
from __future__ import annotations

import os
import sys
import time

import torch

from . import task as taskmod

GIB = float(1 << 30)

_cache: dict = {}


def nbytes(xs) -> int:
    """The bytes of the tensors among `xs`."""
    return sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))


def footprint(t: taskmod.KbTask, overrides: dict, dtype: torch.dtype) -> dict:
    """{"inputs", "weights", "outputs", "flops"} of one forward at `overrides` (bytes; flops 0 where
    FlopCounterMode counts none, as for elementwise work), or {"error": why} where the Model cannot run
    on fake tensors. Cached per (task, shape, dtype)."""
    key = (str(t.path), repr(sorted(overrides.items())), str(dtype))
    if key in _cache:
        return _cache[key]
    from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: PLC0415
    from torch.utils.flop_counter import FlopCounterMode  # noqa: PLC0415

    try:
        with FakeTensorMode():
            model = t.model(overrides, None, dtype)
            xs = t.inputs(overrides, 0, None, dtype)
            weights = nbytes(list(model.parameters()) + list(model.buffers()))
            counter = FlopCounterMode(display=False)
            with torch.no_grad(), counter:
                out = taskmod.as_list(model(*xs))
        r = {"inputs": nbytes(xs), "weights": weights, "outputs": nbytes(out), "flops": int(counter.get_total_flops())}
    except taskmod.TaskError:
        raise
    except Exception as e:  # noqa: BLE001 - a Model fake tensors cannot run (data-dependent shapes, ...)
        r = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
    finally:
        t.apply({})
    _cache[key] = r
    return r


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


class NoRoom(Exception):
    """The device lacks the memory a job needs; the text gives the figures."""


def host_available() -> int:
    """MemAvailable of /proc/meminfo in bytes (0 where it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def room_wait_s(job_timeout_s: float) -> float:
    """How long a GPU job may wait for memory that other processes hold: KFAB_ROOM_WAIT_S (set where
    processes share a GPU: `kfab worker`, `kfab bench --devices` with a device named twice), within the
    job's own deadline."""
    try:
        asked = float(os.environ.get("KFAB_ROOM_WAIT_S") or 0)
    except ValueError:
        asked = 0.0
    return max(0.0, min(asked, 0.75 * job_timeout_s - 10.0))


def check_room(fp: dict, need: int, what: str, device: str, wait_s: float = 0.0) -> None:
    """Refuses (NoRoom) when `need` bytes are more than this process can still get: on a GPU what the
    device has free plus what torch's allocator here holds unused; on the CPU the host's available
    memory. On a GPU whose memory would hold it were other processes not holding theirs, waits up to
    `wait_s` seconds for them first."""
    if "error" in fp:
        return
    if device == "cuda":
        deadline = time.monotonic() + wait_s
        said = False
        while True:
            free, total = torch.cuda.mem_get_info()
            have = free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
            if need <= have or need > 0.97 * total or time.monotonic() >= deadline:
                break
            if not said:
                print(f"kfab worker: {what} needs {gib(need)} and {gib(have)} are free: waiting up to {wait_s:.0f} s "
                      f"for other processes on this GPU", file=sys.stderr, flush=True)
                said = True
            time.sleep(1.0)
        where = f"of the device's {gib(total)} are free ({gib(total - free)} held by this and other processes)"
    else:
        have = host_available()
        if have == 0:
            return
        where = "of the host's memory are available (MemAvailable)"
    if need <= have:
        return
    raise NoRoom(f"the problem does not fit in {'device ' if device == 'cuda' else ''}memory: {what} needs {gib(need)} "
                 f"(inputs {gib(fp['inputs'])}, outputs {gib(fp['outputs'])}, weights {gib(fp['weights'])}), and "
                 f"{gib(have)} {where}; give it smaller sizes (on a GPU, KFAB_GPU in the file overrides its constants) "
                 f"or run it where there is more memory")


def device_memory(reset: bool) -> dict:
    """This process's device memory: torch's allocator's peak since the last reset (reserved: what the
    process took from the device; allocated: what tensors used), and the device's free and total."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {"device": False}
    free, total = torch.cuda.mem_get_info()
    r = {"device": True, "peak_reserved": torch.cuda.max_memory_reserved(), "peak_allocated": torch.cuda.max_memory_allocated(),
         "reserved": torch.cuda.memory_reserved(), "free": free, "total": total}
    if reset:
        torch.cuda.reset_peak_memory_stats()
    return r
