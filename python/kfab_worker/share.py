"""Outputs that leave a candidate's worker for the trusted worker, which compares them.

A candidate's worker exports its outputs after a call: on the CPU into a memfd (its descriptor goes to
kfab over fd 5, and kfab passes it on to the trusted worker), on a GPU as CUDA IPC handles of the memory
they lie in. The trusted worker maps them read-only and compares them with the reference's answer while
kfab holds the candidate's worker stopped: nothing of the candidate runs until the comparison is done.
Only plain fields cross between the processes (no pickles): dtype names, shapes, offsets, handle bytes."""
from __future__ import annotations

import base64
import ctypes
import mmap
import os
import socket

import torch

CHANNEL_FD = 5

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
           "int32": torch.int32, "int64": torch.int64, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
           "bool": torch.bool}


def dtype_name(t: torch.dtype) -> str:
    return str(t).replace("torch.", "")


def not_dumpable() -> None:
    """No process of this user may read this one's memory or take its descriptors (the trusted worker:
    it holds the reference's answers)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        pass


def _channel() -> socket.socket:
    return socket.socket(fileno=os.dup(CHANNEL_FD))


def send_fd(fd: int) -> None:
    s = _channel()
    try:
        socket.send_fds(s, [b"F"], [fd])
    finally:
        s.close()


def receive_fd() -> int:
    s = _channel()
    try:
        _, fds, _, _ = socket.recv_fds(s, 1, 1)
    finally:
        s.close()
    if not fds:
        raise OSError("kfab announced a descriptor and passed none")
    return fds[0]


# -- CUDA driver (IPC) --------------------------------------------------------------------------
class _IpcHandle(ctypes.Structure):
    """CUipcMemHandle: 64 opaque bytes, passed by value."""

    _fields_ = [("reserved", ctypes.c_char * 64)]


class _Cuda:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                                                     ctypes.c_uint64]
        self.lib.cuIpcGetMemHandle.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
        self.lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), _IpcHandle, ctypes.c_uint]
        self.lib.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise OSError(f"{what} failed with CUDA error {rc}")


_cuda: _Cuda | None = None


def _driver() -> _Cuda:
    global _cuda
    if _cuda is None:
        _cuda = _Cuda()
    return _cuda


class _Cai:
    """A device buffer as __cuda_array_interface__, for torch.as_tensor."""

    def __init__(self, ptr: int, shape: list, dtype: torch.dtype) -> None:
        typestr = {torch.float32: "<f4", torch.float16: "<f2", torch.float64: "<f8", torch.int32: "<i4",
                   torch.int64: "<i8", torch.int16: "<i2", torch.int8: "|i1", torch.uint8: "|u1", torch.bool: "|b1"}
        if dtype == torch.bfloat16:
            self.bf16 = True
            dtype = torch.int16
        else:
            self.bf16 = False
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr[dtype], "data": (ptr, False),
                                         "version": 3, "strides": None}


# -- the candidate's side ------------------------------------------------------------------------
class Exported:
    """A description of outputs for the trusted worker, and what must stay alive until it has looked."""

    def __init__(self) -> None:
        self.meta: list[dict] = []
        self.fd: int | None = None
        self.keep: list = []


def export(outputs: list, device: str) -> Exported:
    """Describes the candidate's outputs; on the CPU copies them into one memfd (passed with the reply)."""
    e = Exported()
    if device == "cuda":
        drv = _driver()
        for o in outputs:
            if not isinstance(o, torch.Tensor) or not o.is_cuda:
                e.meta.append({"kind": type(o).__name__ if not isinstance(o, torch.Tensor) else "host tensor"})
                continue
            t = o.detach().contiguous()
            e.keep.append(t)
            base, size = ctypes.c_uint64(), ctypes.c_size_t()
            ptr = t.data_ptr()
            drv.check(drv.lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ptr), "cuMemGetAddressRange")
            handle = ctypes.create_string_buffer(64)
            drv.check(drv.lib.cuIpcGetMemHandle(handle, base.value), "cuIpcGetMemHandle")
            e.meta.append({"kind": "tensor", "dtype": dtype_name(t.dtype), "shape": list(t.shape),
                           "handle": base64.b64encode(handle.raw).decode(), "offset": ptr - base.value,
                           "allocation": size.value, "nbytes": t.numel() * t.element_size()})
        return e
    total = 0
    layout = []
    for o in outputs:
        if not isinstance(o, torch.Tensor):
            layout.append(None)
            continue
        n = o.numel() * o.element_size()
        layout.append((total, n))
        total += (n + 63) // 64 * 64
    fd = os.memfd_create("kfab-outputs", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, max(total, 64))
    with mmap.mmap(fd, max(total, 64)) as m:
        for o, at in zip(outputs, layout):
            if at is None:
                e.meta.append({"kind": type(o).__name__})
                continue
            off, n = at
            t = o.detach().contiguous().cpu()
            if n:
                dst = torch.frombuffer(m, dtype=torch.uint8, count=n, offset=off)
                dst.copy_(t.reshape(-1).view(torch.uint8))
                del dst
            e.meta.append({"kind": "tensor", "dtype": dtype_name(t.dtype), "shape": list(t.shape), "offset": off,
                           "nbytes": n})
    e.fd = fd
    return e


# -- the trusted side ----------------------------------------------------------------------------
class Imported:
    """The candidate's outputs as tensors (read-only views), and what to release after comparing."""

    def __init__(self) -> None:
        self.tensors: list = []
        self._map: mmap.mmap | None = None
        self._ipc: list[int] = []

    def close(self) -> None:
        self.tensors = []
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass
            self._map = None
        if self._ipc:
            drv = _driver()
            for p in self._ipc:
                drv.lib.cuIpcCloseMemHandle(p)
            self._ipc = []


def _described(m: dict) -> tuple:
    """The dtype, shape, element count and byte count an export() entry describes; ValueError when the
    dtype is unknown or a size negative (a candidate's description is not trusted)."""
    dtype = _DTYPES.get(str(m.get("dtype")))
    shape = [int(d) for d in m.get("shape", [])]
    if dtype is None or any(d < 0 for d in shape):
        raise ValueError("an output described with an unknown dtype or a negative size")
    n = 1
    for d in shape:
        n *= d
    return dtype, shape, n, n * torch.empty((), dtype=dtype).element_size()


def import_outputs(meta: list, fd: int | None, device: str) -> Imported:
    """Maps what export() described; a field out of range is the candidate's failure (ValueError)."""
    imp = Imported()
    if device == "cuda":
        drv = _driver()
        opened: dict[str, int] = {}
        for m in meta:
            if m.get("kind") != "tensor":
                imp.tensors.append(m.get("kind", "nothing"))
                continue
            dtype, shape, n, nbytes = _described(m)
            h = str(m.get("handle", ""))
            if h not in opened:
                raw = base64.b64decode(h)
                if len(raw) != 64:
                    raise ValueError("an output's CUDA IPC handle is not 64 bytes")
                ptr = ctypes.c_uint64()
                drv.check(drv.lib.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), _IpcHandle.from_buffer_copy(raw), 1),
                          "cuIpcOpenMemHandle")
                opened[h] = ptr.value
                imp._ipc.append(ptr.value)
            base = opened[h]
            b2, size = ctypes.c_uint64(), ctypes.c_size_t()
            drv.check(drv.lib.cuMemGetAddressRange_v2(ctypes.byref(b2), ctypes.byref(size), base), "cuMemGetAddressRange")
            off = int(m.get("offset", -1))
            if off < 0 or off + nbytes > size.value:
                raise ValueError("an output lies outside the memory its handle opens")
            cai = _Cai(base + off, shape, dtype)
            t = torch.as_tensor(cai, device="cuda")
            imp.tensors.append(t.view(torch.bfloat16) if cai.bf16 else t)
        return imp
    if fd is None:
        raise ValueError("the candidate's outputs came without their shared memory")
    st = os.fstat(fd)
    size = st.st_size
    imp._map = mmap.mmap(fd, size, prot=mmap.PROT_READ) if size else None
    os.close(fd)
    for m in meta:
        if m.get("kind") != "tensor":
            imp.tensors.append(m.get("kind", "nothing"))
            continue
        dtype, shape, n, nbytes = _described(m)
        off = int(m.get("offset", -1))
        if off < 0 or off + nbytes > size or imp._map is None and n:
            raise ValueError("an output lies outside the candidate's shared memory")
        if n == 0:
            imp.tensors.append(torch.empty(shape, dtype=dtype))
            continue
        import warnings  # noqa: PLC0415 - frombuffer warns that the buffer is read-only

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = torch.frombuffer(imp._map, dtype=dtype, count=n, offset=off)
        imp.tensors.append(t.reshape(shape))
    return imp
