"""GPU clocks while a time job runs, read through NVML (libnvidia-ml.so.1, by ctypes): the SM and
memory clock ranges and every reason NVML gave for holding them down. The same fields as
kfab-runner's (ClockLog in src/runner/jobs.cpp). kfab never sets clocks; it records them."""
from __future__ import annotations

import ctypes

_NVML_CLOCK_SM, _NVML_CLOCK_MEM = 1, 2
_REASONS = ((0x2, "applications_clocks"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"), (0x10, "sync_boost"),
            (0x20, "sw_thermal"), (0x40, "hw_thermal"), (0x80, "hw_power_brake"), (0x100, "display_clocks"))


class _Nvml:
    def __init__(self) -> None:
        self.ok = False
        self.dev = ctypes.c_void_p()
        self.reasons_fn = None
        try:
            self.lib = ctypes.CDLL("libnvidia-ml.so.1")
            if self.lib.nvmlInit_v2() != 0:
                return
            # torch's device 0 is NVML's device 0 only when nothing hides or reorders devices
            # (CUDA_VISIBLE_DEVICES, as `kfab bench --devices` pins its processes): found by PCI bus id.
            bus = _pci_bus_id()
            if (bus is None or self.lib.nvmlDeviceGetHandleByPciBusId_v2(bus, ctypes.byref(self.dev)) != 0) \
                    and self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.dev)) != 0:
                return
            for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
                try:
                    self.reasons_fn = getattr(self.lib, name)
                    break
                except AttributeError:
                    continue
            self.ok = True
        except (OSError, AttributeError):
            self.ok = False

    def read(self) -> tuple[int, int, int] | None:
        sm, mem, why = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
        if (self.lib.nvmlDeviceGetClockInfo(self.dev, _NVML_CLOCK_SM, ctypes.byref(sm)) != 0
                or self.lib.nvmlDeviceGetClockInfo(self.dev, _NVML_CLOCK_MEM, ctypes.byref(mem)) != 0):
            return None
        if self.reasons_fn is not None and self.reasons_fn(self.dev, ctypes.byref(why)) != 0:
            why.value = 0
        return sm.value, mem.value, why.value


_nvml: _Nvml | None = None


def _pci_bus_id() -> bytes | None:
    """CUDA device 0's PCI address as NVML writes it (domain:bus:device.0), or None."""
    try:
        import torch  # noqa: PLC0415 - only where clocks are read, on a GPU

        p = torch.cuda.get_device_properties(0)
        return f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0".encode()
    except (ImportError, AttributeError, RuntimeError, AssertionError):
        return None


def reason_names(mask: int) -> str:
    names = [n for bit, n in _REASONS if mask & bit]
    return ",".join(names) if names else "none"


class ClockLog:
    def __init__(self) -> None:
        global _nvml  # noqa: PLW0603 - NVML is initialised once per worker
        if _nvml is None:
            _nvml = _Nvml()
        self.ok = _nvml.ok
        self.sm: list[int] = []
        self.mem: list[int] = []
        self.reasons = 0

    def sample(self) -> None:
        if not self.ok:
            return
        r = _nvml.read()
        if r is None:
            self.ok = False
            return
        self.sm.append(r[0])
        self.mem.append(r[1])
        self.reasons |= r[2] & ~0x1  # gpu_idle is expected between calls

    def to_json(self) -> dict:
        if not self.ok or not self.sm:
            return {"recorded": False, "why": "NVML (libnvidia-ml.so.1) is not available"}
        lo, hi = min(self.sm), max(self.sm)
        return {"recorded": True, "sm_mhz_min": lo, "sm_mhz_max": hi, "mem_mhz_min": min(self.mem),
                "mem_mhz_max": max(self.mem), "reasons": reason_names(self.reasons), "samples": len(self.sm),
                "drift": hi > 0 and (hi - lo) / hi > 0.05}
