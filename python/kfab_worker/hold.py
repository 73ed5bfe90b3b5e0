"""A hold kernel for the GPU timer: it fills every SM (as many 1024-thread blocks as an SM takes
threads) and spins for a number of SM clock cycles, so that nothing launched on any stream can start
until it ends. The timer enqueues it before the cache flush: the host then issues the flush, the start
event and the call while the device is busy, and the device goes from the flush straight into the call
(the host's launch latency is not timed). Because it fills the device, a call cannot hide work on a
side stream inside the hold: that work starts after it, and the wall clock sees it.

It is loaded as PTX through the driver API (libcuda, by ctypes) into torch's context and launched on
torch's current stream. torch.cuda._sleep is not used: it runs one thread, and leaves the rest of the
device free for a side stream."""
from __future__ import annotations

import ctypes

import torch

# Every thread spins until clock64 has advanced by `cycles` from its own start.
_PTX = b"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry kfab_hold(.param .u64 cycles)
{
  .reg .pred %p;
  .reg .b64 %t0, %t1, %d, %c;
  ld.param.u64 %c, [cycles];
  mov.u64 %t0, %clock64;
SPIN:
  mov.u64 %t1, %clock64;
  sub.s64 %d, %t1, %t0;
  setp.lt.s64 %p, %d, %c;
  @%p bra SPIN;
  ret;
}
"""


class HoldKernel:
    """hold(cycles) on torch's current stream; `ok` is False (with `why`) where it cannot be loaded."""

    def __init__(self) -> None:
        self.ok, self.why = False, ""
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            self.why = f"libcuda.so.1: {e}"
            return
        torch.cuda.synchronize()  # torch's (primary) context is current on this thread from here on
        self.mod, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        rc = self.lib.cuModuleLoadData(ctypes.byref(self.mod), ctypes.c_char_p(_PTX))
        if rc == 0:
            rc = self.lib.cuModuleGetFunction(ctypes.byref(self.fn), self.mod, b"kfab_hold")
        if rc != 0:
            self.why = f"loading the hold kernel's PTX: CUresult {rc}"
            return
        props = torch.cuda.get_device_properties(0)
        per_sm = max(1, int(getattr(props, "max_threads_per_multi_processor", 2048)) // 1024)
        self.blocks = props.multi_processor_count * per_sm
        self.cycles = ctypes.c_uint64(0)
        self.params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(self.cycles), ctypes.c_void_p))
        self.lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        self.ok = True

    def __call__(self, cycles: int) -> None:
        self.cycles.value = cycles
        stream = torch.cuda.current_stream().cuda_stream
        rc = self.lib.cuLaunchKernel(self.fn, self.blocks, 1, 1, 1024, 1, 1, 0, stream,
                                     ctypes.cast(self.params, ctypes.c_void_p), None)
        if rc != 0:
            raise RuntimeError(f"the timer's hold kernel did not launch: CUresult {rc}")
